"""`unilab fleet serve`: the fleet server, one process.

    link thread   FleetHub (`hub.py`): CURVE ROUTER the robot hosts dial (status in,
                  commands out)
    main thread   uvicorn running the Starlette app of `web.py` (dashboard, API, WebSocket)

The server binds 127.0.0.1 unless `--host` says otherwise. Every alert and every operator
action goes to the event log (JSONL, fsync-ed: `events.py`).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from unilab.teleop.fleet.events import EventLog
from unilab.teleop.fleet.hub import FleetHub
from unilab.teleop.fleet.keys import SERVER, FleetKeys
from unilab.teleop.fleet.state import AlertConfig, FleetState
from unilab.teleop.fleet.web import create_app

TOKEN_ENV = "UNILAB_FLEET_TOKEN"


class FleetServerError(ValueError):
    """Bad input to the fleet server (exit 2)."""


def resolve_token(token: str | None) -> tuple[str, bool]:
    """(token, generated): --token, else $UNILAB_FLEET_TOKEN, else a fresh random one."""
    value = token or os.environ.get(TOKEN_ENV, "")
    if value:
        if len(value) < 8:
            raise FleetServerError("the operator token must be at least 8 characters")
        return value, False
    return secrets.token_urlsafe(18), True


def _server_class(uvicorn: Any) -> Any:
    """uvicorn's Server, except that Ctrl-C / SIGTERM end `run()` and nothing more: uvicorn
    re-raises the signal after its shutdown, which would kill the process before the link
    is closed and `server_stopped` is logged."""

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            sigs = (signal.SIGINT, signal.SIGTERM)
            previous = {s: signal.signal(s, self.handle_exit) for s in sigs}
            try:
                yield
            finally:
                for s, handler in previous.items():
                    signal.signal(s, handler)

    return Server


def serve(
    *,
    keys: str | os.PathLike[str],
    host: str = "127.0.0.1",
    port: int = 8700,
    link: str = "tcp://127.0.0.1:7100",
    events_path: str | os.PathLike[str] = "fleet-events.jsonl",
    token: str | None = None,
    stall_s: float = 3.0,
    lost_s: float = 0.5,
    fail_below: float = 0.3,
    ready_file: str | None = None,
    duration_s: float | None = None,
) -> int:
    import uvicorn

    try:
        config = AlertConfig(stall_s=stall_s, lost_s=lost_s, fail_below=fail_below)
    except ValueError as exc:
        raise FleetServerError(str(exc)) from None
    if not 0 <= port < 65536:
        raise FleetServerError(f"--port {port}: give 0..65535")
    tok, generated = resolve_token(token)
    k = FleetKeys(Path(keys))
    k.require(SERVER)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)  # browsers that come early wait in the backlog for uvicorn
    except OSError as exc:
        sock.close()
        raise FleetServerError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    events = EventLog(events_path)
    state = FleetState(config, events)
    try:
        hub = FleetHub(
            state,
            secret_key=k.secret(SERVER),
            allow_dir=k.allowed,
            endpoint=link,
            events=events,
        ).start()
    except Exception:
        sock.close()
        events.close()
        raise
    bound = sock.getsockname()
    url = f"http://{host if ':' not in host else '[' + host + ']'}:{bound[1]}"
    app = create_app(state, hub, events, tok)
    server = _server_class(uvicorn)(
        uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    )
    events.append("server_started", url=url, link=hub.endpoint)
    shown = f"{url}/?token={tok}" if generated else f"{url}/ (token from --token/${TOKEN_ENV})"
    if host not in ("127.0.0.1", "localhost", "::1"):
        print(f"fleet serve: listening on {host}, beyond this machine: put TLS in front")
    print(f"fleet serve: dashboard {shown}; robot link {hub.endpoint}", flush=True)
    if ready_file:
        tmp = Path(f"{ready_file}.tmp")
        tmp.write_text(json.dumps({"url": url, "link": hub.endpoint}))
        tmp.replace(ready_file)
    stopper = None
    if duration_s is not None:
        import threading

        stopper = threading.Timer(duration_s, lambda: setattr(server, "should_exit", True))
        stopper.daemon = True
        stopper.start()
    try:
        server.run(sockets=[sock])
    finally:
        if stopper is not None:
            stopper.cancel()
        hub.close()
        events.append("server_stopped")
        events.close()
        sock.close()
    return 0
