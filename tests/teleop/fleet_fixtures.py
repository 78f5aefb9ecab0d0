"""Helpers of the fleet tests: HTTP on loopback with the standard library, and waiting."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

TOKEN = "fleet-test-token"


def http(method: str, url: str, token: str | None = TOKEN) -> tuple[int, bytes]:
    """(status, body) of one request; an HTTP error status is returned, not raised."""
    req = urllib.request.Request(url, method=method)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status), bytes(resp.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), bytes(exc.read())


def get_json(url: str, token: str | None = TOKEN) -> tuple[int, Any]:
    code, body = http("GET", url, token)
    return code, json.loads(body)


def wait_for(check: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)
