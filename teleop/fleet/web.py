"""The fleet server's web side: a Starlette app over a `FleetState` (and the hub that
carries the operator's commands to the robot hosts).

    GET  /                         the dashboard page (static; it asks for the token)
    GET  /static/...               its script and style sheet
    GET  /api/state                everything now, as JSON
    GET  /api/robots/<robot>       one robot (404: unknown)
    POST /api/robots/<robot>/<op>  takeover | pause | reset | resume (404 unknown robot,
                                   409 lost robot, 400 unknown op)
    GET  /thumb/<robot>            the newest camera thumbnail (JPEG)
    WS   /ws                       state deltas pushed every 50 ms at most; the operator's
                                   commands come back on it

All but the page need the token, as `?token=` or `Authorization: Bearer`: an API call
without it gets 401 with a message, a WebSocket is refused before accept (HTTP 403).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import re
import time
from pathlib import Path
from typing import Any

from unilab.teleop.fleet.events import EventLog
from unilab.teleop.fleet.hub import FleetHub
from unilab.teleop.fleet.state import FleetState
from unilab.teleop.fleet.wire import FLEET_OPS

STATIC = Path(__file__).parent / "static"
PUSH_S = 0.05
"""Smallest gap between two pushes to one browser: 20 updates/s at most, coalesced."""
OPERATOR_PATTERN = re.compile(r"[^A-Za-z0-9_.@ -]")


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
