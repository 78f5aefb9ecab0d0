"""The fleet server as a process (`unilab fleet serve`: real uvicorn, real CurveZMQ link)
with two simulated robot hosts: the token, clear errors for bad input, commands reaching a
host and its acknowledgement landing in the event log, and a robot key outside the
allowlist never showing up."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fleet_fixtures import TOKEN, get_json, http, wait_for
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from unilab.teleop.fleet.events import read_events
from unilab.teleop.fleet.keys import SERVER, SIM_ROBOT, make_fleet_keys
from unilab.teleop.fleet.launch import ServerProcess, start_server
from unilab.teleop.fleet.sim import (
    FleetSimError,
    SimRobotProcess,
    start_fleet_sim,
    stop_fleet_sim,
)


@pytest.fixture(scope="module")
def fleet(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerProcess, list[SimRobotProcess], Path]]:
    work = tmp_path_factory.mktemp("fleet-server")
    keys = make_fleet_keys(work / "keys")
    server = start_server(keys.root, work, token=TOKEN)
    robots: list[SimRobotProcess] = []
    try:
        robots = start_fleet_sim(robots=2, fleet=server.link, keys=keys.root, workdir=work)
        wait_for(lambda: len(get_json(f"{server.url}/api/state")[1]["robots"]) == 2, 60, "2 robots")
        yield server, robots, work
    finally:
        stop_fleet_sim(robots)
        server.stop()


def test_token_is_required(fleet: tuple[ServerProcess, list[SimRobotProcess], Path]) -> None:
    server = fleet[0]
    for token in (None, "wrong-token"):
        code, body = get_json(f"{server.url}/api/state", token)
        assert code == 401 and body == {"error": "bad or missing token"}
        assert http("GET", f"{server.url}/thumb/sim-01", token)[0] == 401
        assert http("POST", f"{server.url}/api/robots/sim-01/reset", token)[0] == 401
    with pytest.raises(InvalidStatus) as refused:
        connect(server.url.replace("http", "ws") + "/ws?token=wrong-token", open_timeout=10)
    assert refused.value.response.status_code == 403
    # The page itself carries no data; it asks for the token.
    code, page = http("GET", f"{server.url}/", None)
    assert code == 200 and b"Token" in page


def test_bad_input_gets_clear_errors(
    fleet: tuple[ServerProcess, list[SimRobotProcess], Path],
) -> None:
    server = fleet[0]
    code, body = get_json(f"{server.url}/api/robots/sim-99")
    assert code == 404 and body == {"error": "no robot 'sim-99'"}
    code, body = http("POST", f"{server.url}/api/robots/sim-99/reset")
    assert code == 404 and b"no robot 'sim-99'" in body
    code, body = http("POST", f"{server.url}/api/robots/sim-01/explode")
    assert code == 400 and b"op must be one of" in body
    assert http("GET", f"{server.url}/thumb/sim-99")[0] == 404
    with connect(server.url.replace("http", "ws") + f"/ws?token={TOKEN}") as ws:
        assert '"type":"delta"' in str(ws.recv(timeout=10)).replace(" ", "")
        ws.send("not json")
        assert "send JSON" in str(ws.recv(timeout=10))


def test_reset_reaches_the_host_and_is_logged(
    fleet: tuple[ServerProcess, list[SimRobotProcess], Path],
) -> None:
    server = fleet[0]
    before = get_json(f"{server.url}/api/robots/sim-02")[1]
    assert before["mode"] == "running" and before["controller"] == "autopilot"
    code, reply = get_json_post(f"{server.url}/api/robots/sim-02/reset?operator=olga")
    assert code == 200 and reply["sent"] is True
    wait_for(
        lambda: get_json(f"{server.url}/api/robots/sim-02")[1]["episode"] > before["episode"],
        5,
        "the episode counter to rise",
    )
    acks = wait_for(
        lambda: [e for e in read_events(server.events) if e["kind"] == "ack"], 5, "the ack"
    )
    assert acks[-1]["robot"] == "sim-02" and acks[-1]["op"] == "reset" and acks[-1]["ok"]
    actions = [e for e in read_events(server.events) if e["kind"] == "operator_action"]
    assert actions[-1]["operator"] == "olga" and actions[-1]["request"] == reply["request"]
    # The camera renders in its own process: its first frame may come a moment later.
    wait_for(lambda: http("GET", f"{server.url}/thumb/sim-01")[0] == 200, 10, "a thumbnail")
    code, jpeg = http("GET", f"{server.url}/thumb/sim-01")
    assert code == 200 and jpeg[:2] == b"\xff\xd8"


def get_json_post(url: str) -> tuple[int, dict[str, object]]:
    code, body = http("POST", url)
    return code, json.loads(body)


def test_a_robot_key_outside_the_allowlist_is_never_shown(
    fleet: tuple[ServerProcess, list[SimRobotProcess], Path],
) -> None:
    server, _, work = fleet
    keys = make_fleet_keys(work / "keys")
    intruder = make_fleet_keys(work / "intruder-keys")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "unilab.teleop.fleet.sim_robot",
            "--name",
            "intruder",
            "--fleet",
            server.link,
            "--key",
            intruder.secret(SIM_ROBOT),
            "--fleet-key",
            keys.public(SERVER),
            "--allow",
            keys.stations,
            "--no-thumbnails",
            "--ready-file",
            str(work / "intruder.ready"),
        ]
    )
    try:

        def running() -> bool:
            assert proc.poll() is None, f"the intruder host exited with {proc.returncode}"
            return (work / "intruder.ready").is_file()

        wait_for(running, 60, "the intruder host to run")
        time.sleep(2.5)  # the host says hello once a second: two tries, both refused
        seen = get_json(f"{server.url}/api/state")[1]["robots"]
        assert "intruder" not in seen and {"sim-01", "sim-02"} <= set(seen)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_sim_robots_run_an_exported_policy(
    fleet: tuple[ServerProcess, list[SimRobotProcess], Path], demo_policy: Path
) -> None:
    """`unilab fleet sim --policy policy.onnx`: the on-board policy drives, and a robot told
    to fail raises the predicted-failure alert and a takeover request."""
    server, _, work = fleet
    keys = make_fleet_keys(work / "keys")
    robots = start_fleet_sim(
        robots=1,
        fleet=server.link,
        keys=keys.root,
        policy=str(demo_policy),
        fail=["onnx-01"],
        fault_after_s=0.0,
        seed=7,
        thumbnails=False,
        workdir=work / "policy",
        prefix="onnx",
    )
    try:
        wait_for(
            lambda: any(
                q["robot"] == "onnx-01" and q["request"] == "takeover"
                for q in get_json(f"{server.url}/api/state")[1]["queue"]
            ),
            20,
            "a takeover request for the failing robot",
        )
        robot = get_json(f"{server.url}/api/robots/onnx-01")[1]
        assert robot["controller"] == "autopilot" and robot["mode"] == "running"
        assert robot["predicted_success"] is not None and robot["predicted_success"] < 0.3
    finally:
        stop_fleet_sim(robots)


def test_bad_options_are_refused_with_a_message(tmp_path: Path) -> None:
    keys = make_fleet_keys(tmp_path / "keys")
    with pytest.raises(FleetSimError, match="give 1 to 64"):
        start_fleet_sim(robots=0, fleet="tcp://127.0.0.1:1", keys=keys.root)
    with pytest.raises(FleetSimError, match=r"robots are named sim-01 \.\. sim-03"):
        start_fleet_sim(robots=3, fleet="tcp://127.0.0.1:1", keys=keys.root, stall=["sim-04"])
    with pytest.raises(FleetSimError, match="unilab fleet keygen"):
        start_fleet_sim(robots=1, fleet="tcp://127.0.0.1:1", keys=tmp_path / "none")
    cli = [sys.executable, "-m", "unilab.cli", "fleet", "serve"]
    done = subprocess.run(
        [*cli, "--keys", str(tmp_path / "none"), "--port", "0"], capture_output=True, text=True
    )
    assert done.returncode == 2 and "unilab fleet keygen" in done.stderr
    done = subprocess.run(
        [*cli, "--keys", str(keys.root), "--port", "0", "--token", "short"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "at least 8 characters" in done.stderr


def test_a_robot_host_reports_with_fleet_option(
    fleet: tuple[ServerProcess, list[SimRobotProcess], Path],
) -> None:
    """`unilab robot-host --fleet`: a host without an on-board policy reports, stopped and
    uncontrolled; Pause is done, Resume is refused with the reason, both acknowledged."""
    server, _, work = fleet
    keys = make_fleet_keys(work / "keys")
    ready = work / "floor-1.ready"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "unilab.cli",
            "robot-host",
            "--robot",
            "sim:arm_reach",
            "--name",
            "floor-1",
            "--key",
            keys.secret(SIM_ROBOT),
            "--allow",
            keys.stations,
            "--endpoint",
            "tcp://127.0.0.1:0",
            "--fleet",
            server.link,
            "--fleet-key",
            keys.public(SERVER),
            "--ready-file",
            str(ready),
            "--duration",
            "60",
        ]
    )
    try:

        def robot() -> dict[str, Any] | None:
            code, body = get_json(f"{server.url}/api/robots/floor-1")
            return body if code == 200 and body["updates"] > 3 else None

        view = wait_for(robot, 60, "floor-1 to report")
        assert view["mode"] == "stopped" and view["controller"] == ""
        assert view["task"] and view["driver"] == "sim:arm_reach"
        for op in ("pause", "resume"):
            assert http("POST", f"{server.url}/api/robots/floor-1/{op}")[0] == 200

        def acks() -> list[dict[str, Any]] | None:
            got = [e for e in read_events(server.events) if e["kind"] == "ack"]
            mine = [e for e in got if e["robot"] == "floor-1"]
            return mine if len(mine) == 2 else None

        done = wait_for(acks, 10, "two acks from floor-1")
        assert [(a["op"], a["ok"]) for a in done] == [("pause", True), ("resume", False)]
        assert "no on-board policy" in done[1]["detail"]
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert proc.returncode == 0


def test_fleet_keygen_and_sim_verbs(
    fleet: tuple[ServerProcess, list[SimRobotProcess], Path],
) -> None:
    """`unilab fleet keygen` then `unilab fleet sim --robots 2 --duration`: both robots
    report, the ready file names their pids, and the launcher stops them and exits 0."""
    server, _, work = fleet
    cli = [sys.executable, "-m", "unilab.cli", "fleet"]
    done = subprocess.run(
        [*cli, "keygen", "--dir", str(work / "keys")], capture_output=True, text=True
    )
    assert done.returncode == 0 and "fleet keys in" in done.stdout
    ready = work / "verb-sim.json"
    sim = subprocess.Popen(
        [
            *cli,
            "sim",
            "--keys",
            str(work / "keys"),
            "--robots",
            "2",
            "--prefix",
            "verb",
            "--fleet",
            server.link,
            "--no-thumbnails",
            "--ready-file",
            str(ready),
            "--duration",
            "8",
        ]
    )
    try:
        wait_for(ready.is_file, 60, "the sim's ready file")
        info = json.loads(ready.read_text())
        assert sorted(info) == ["verb-01", "verb-02"] and all(v["pid"] > 0 for v in info.values())

        def both() -> bool:
            names = get_json(f"{server.url}/api/state")[1]["robots"]
            return {"verb-01", "verb-02"} <= set(names)

        wait_for(both, 20, "both verb robots on the server")
        assert sim.wait(timeout=30) == 0
    finally:
        if sim.poll() is None:
            sim.kill()
            sim.wait()
