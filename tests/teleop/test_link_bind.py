"""Binding the host's socket pair (command on port p, status on p + 1) on real sockets."""

from __future__ import annotations

import time
from typing import Any

import pytest
import zmq

from unilab.teleop import link as link_module


def _pair(ctx: zmq.Context[Any]) -> tuple[zmq.Socket[Any], zmq.Socket[Any]]:
    router, pub = ctx.socket(zmq.ROUTER), ctx.socket(zmq.PUB)
    for sock in (router, pub):
        sock.setsockopt(zmq.LINGER, 0)
    return router, pub


def test_ephemeral_bind_moves_on_when_status_port_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = zmq.Context()
    squatter = ctx.socket(zmq.PUB)
    squatter.setsockopt(zmq.LINGER, 0)
    taken_port = squatter.bind_to_random_port("tcp://127.0.0.1")
    taken = f"tcp://127.0.0.1:{taken_port}"
    real = link_module.status_endpoint
    calls: list[str] = []

    def first_taken(command_endpoint: str) -> str:
        # The race this guards against: the OS hands out p while p + 1 belongs to someone else.
        calls.append(command_endpoint)
        return taken if len(calls) == 1 else real(command_endpoint)

    monkeypatch.setattr(link_module, "status_endpoint", first_taken)
    router, pub = _pair(ctx)
    try:
        status = link_module._bind_pair(router, pub, "tcp://127.0.0.1:0")
        assert len(calls) == 2
        command = router.getsockopt_string(zmq.LAST_ENDPOINT)
        assert status == real(command) and status != taken
        assert pub.getsockopt_string(zmq.LAST_ENDPOINT) == status
    finally:
        ctx.destroy(linger=0)


def test_fixed_endpoint_with_taken_status_port_fails_and_frees_the_command_port() -> None:
    ctx = zmq.Context()
    squatter = ctx.socket(zmq.PUB)
    squatter.setsockopt(zmq.LINGER, 0)
    taken_port = squatter.bind_to_random_port("tcp://127.0.0.1")
    endpoint = f"tcp://127.0.0.1:{taken_port - 1}"
    router, pub = _pair(ctx)
    try:
        try:
            link_module._bind_pair(router, pub, endpoint)
        except zmq.ZMQError as err:
            assert err.errno == zmq.EADDRINUSE
        else:
            pytest.fail("binding next to a taken status port must fail")
        # Nothing stays bound on the command port, so the caller can retry or report
        # (libzmq releases an unbound port from its I/O thread: allow it a moment).
        again = ctx.socket(zmq.ROUTER)
        again.setsockopt(zmq.LINGER, 0)
        for attempt in range(50):
            try:
                again.bind(endpoint)
                break
            except zmq.ZMQError:
                if attempt == 49:
                    raise
                time.sleep(0.02)
    finally:
        ctx.destroy(linger=0)  # closes every socket of the context, whatever failed
