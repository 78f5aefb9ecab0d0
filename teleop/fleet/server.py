"""`unilab fleet serve`: the fleet server, one process.

    link thread   FleetHub: CURVE ROUTER the robot hosts dial (status in, commands out)
    main thread   uvicorn running a Starlette app:
                    GET /               the dashboard page (static; it asks for the token)
                    GET /static/...     its script and style sheet
                    GET /api/state      everything now, as JSON            (token)
                    GET /api/robots/<robot>         one robot (404: unknown)  (token)
                    POST /api/robots/<robot>/<op>   takeover|pause|reset|resume (token;
                                                    404 unknown robot, 409 lost robot)
                    GET /thumb/<robot>  the newest camera thumbnail (JPEG)  (token)
                    WS  /ws             state deltas pushed every 50 ms at most; the
                                        operator's commands come back on it (token)

The token travels as `?token=` (or `Authorization: Bearer`); a WebSocket with a wrong or
missing token is refused before it is accepted (HTTP 403), an API call gets 401. The
server binds 127.0.0.1 unless `--host` says otherwise. Every alert and every operator
action goes to the event log (JSONL, fsync-ed: `events.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import os
import re
import secrets
import socket
import time
from pathlib import Path
from typing import Any

from unilab.teleop.fleet.events import EventLog
from unilab.teleop.fleet.hub import FleetHub
from unilab.teleop.fleet.keys import SERVER, FleetKeys
from unilab.teleop.fleet.state import AlertConfig, FleetState
from unilab.teleop.fleet.wire import FLEET_OPS

STATIC = Path(__file__).parent / "static"
PUSH_S = 0.05
"""Smallest gap between two pushes to one browser: 20 updates/s at most, coalesced."""
TOKEN_ENV = "UNILAB_FLEET_TOKEN"
OPERATOR_PATTERN = re.compile(r"[^A-Za-z0-9_.@ -]")


class FleetServerError(ValueError):
    """Bad input to the fleet server (exit 2)."""


def _token_ok(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


def _request_token(request: Any) -> str | None:
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return str(auth[7:].strip())
    value = request.query_params.get("token")
    return None if value is None else str(value)


def _operator(given: str) -> str:
    """The operator's name as the event log records it (a short, plain label)."""
    return OPERATOR_PATTERN.sub("", given)[:32].strip() or "operator"


def create_app(state: FleetState, hub: FleetHub | None, events: EventLog | None, token: str) -> Any:
    """The Starlette app over a state (and a hub to send commands through)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import FileResponse, JSONResponse, Response
    from starlette.routing import Mount, Route, WebSocketRoute
    from starlette.staticfiles import StaticFiles
    from starlette.websockets import WebSocket, WebSocketDisconnect

    requests = {"next": 1}

    async def index(request: Request) -> Response:
        return FileResponse(STATIC / "dashboard.html", headers={"Cache-Control": "no-store"})

    async def api_state(request: Request) -> Response:
        if not _token_ok(_request_token(request), token):
            return JSONResponse({"error": "bad or missing token"}, status_code=401)
        return JSONResponse(state.delta(0, time.monotonic()))

    async def thumb(request: Request) -> Response:
        if not _token_ok(_request_token(request), token):
            return Response("bad or missing token", status_code=401)
        name = str(request.path_params["robot"])
        if name not in state.names():
            return Response(f"no robot {name[:64]!r}", status_code=404)
        data = state.thumbnail(name)
        if data is None:
            return Response(f"no thumbnail from {name} yet", status_code=404)
        return Response(data, media_type="image/jpeg", headers={"Cache-Control": "no-store"})

    def command(msg: Any, operator: str) -> tuple[int, dict[str, Any]]:
        """(HTTP status, reply) for one operator command; the WebSocket sends the reply."""
        if not isinstance(msg, dict):
            return 400, {"type": "error", "detail": "a command is {op, robot}"}
        op, robot = msg.get("op"), msg.get("robot")
        if op not in FLEET_OPS:
            return 400, {"type": "error", "detail": f"op must be one of {list(FLEET_OPS)}"}
        if not isinstance(robot, str) or robot not in state.names():
            return 404, {"type": "error", "detail": f"no robot {str(robot)[:64]!r}"}
        if state.is_lost(robot):  # its connection is gone: the command would vanish
            return 409, {"type": "error", "detail": f"{robot} is lost: its host is not reporting"}
        request = requests["next"]
        requests["next"] += 1
        now = time.monotonic()
        if op == "takeover":
            state.request_takeover(robot, operator, now)
        elif op == "resume":
            state.clear_takeover(robot)
        sent = hub.send_control(robot, op, operator, request) if hub is not None else False
        if events is not None:
            events.append(
                "operator_action", robot=robot, op=op, operator=operator, request=request, sent=sent
            )
        return 200, {"type": "sent", "op": op, "robot": robot, "request": request, "sent": sent}

    async def api_robot(request: Request) -> Response:
        if not _token_ok(_request_token(request), token):
            return JSONResponse({"error": "bad or missing token"}, status_code=401)
        name = str(request.path_params["robot"])
        view = state.robot_json(name, time.monotonic())
        if view is None:
            return JSONResponse({"error": f"no robot {name[:64]!r}"}, status_code=404)
        return JSONResponse(view)

    async def api_command(request: Request) -> Response:
        """POST /api/robots/<robot>/<op>?operator=NAME: the dashboard's buttons, for scripts."""
        if not _token_ok(_request_token(request), token):
            return JSONResponse({"error": "bad or missing token"}, status_code=401)
        msg = {"robot": request.path_params["robot"], "op": request.path_params["op"]}
        code, reply = command(msg, _operator(request.query_params.get("operator", "")))
        return JSONResponse(reply, status_code=code)

    async def ws(websocket: WebSocket) -> None:
        if not _token_ok(websocket.query_params.get("token"), token):
            await websocket.close(code=1008)  # before accept: the client sees HTTP 403
            return
        operator = _operator(websocket.query_params.get("operator", ""))
        await websocket.accept()

        async def reader() -> None:
            while True:
                try:
                    text = await websocket.receive_text()
                    msg = json.loads(text)
                except (json.JSONDecodeError, UnicodeDecodeError):
                    await websocket.send_json({"type": "error", "detail": "send JSON"})
                    continue
                await websocket.send_json(command(msg, operator)[1])

        task = asyncio.create_task(reader())
        version = -1
        try:
            while not task.done():
                delta = state.delta(version if version >= 0 else 0, time.monotonic())
                if delta["version"] != version:
                    version = delta["version"]
                    delta["type"] = "delta"
                    delta["server_time"] = time.time()
                    await websocket.send_json(delta)
                await asyncio.sleep(PUSH_S)
        except (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect, RuntimeError):
                await task

    return Starlette(
        routes=[
            Route("/", index),
            Route("/api/state", api_state),
            Route("/api/robots/{robot}", api_robot),
            Route("/api/robots/{robot}/{op}", api_command, methods=["POST"]),
            Route("/thumb/{robot}", thumb),
            WebSocketRoute("/ws", ws),
            Mount("/static", StaticFiles(directory=str(STATIC)), name="static"),
        ]
    )


def resolve_token(token: str | None) -> tuple[str, bool]:
    """(token, generated): --token, else $UNILAB_FLEET_TOKEN, else a fresh random one."""
    value = token or os.environ.get(TOKEN_ENV, "")
    if value:
        if len(value) < 8:
            raise FleetServerError("the operator token must be at least 8 characters")
        return value, False
    return secrets.token_urlsafe(18), True


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
    server = uvicorn.Server(
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
