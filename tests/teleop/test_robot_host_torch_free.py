"""The robot host must run in LeRobot's environment next to its drivers: importing and
running it (with a simulated robot) loads neither torch nor the learner stack."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hil_fixtures import Keys

LEARNER_STACK = ("torch", "unilab.train", "unilab.algos", "unilab.runtime", "unilab.policies")

SCRIPT = """
import json, sys
from unilab.teleop.robot_host import main
rc = main(sys.argv[1:])
print(json.dumps({"rc": rc, "modules": sorted(sys.modules)}))
"""


def test_robot_host_runs_without_torch(keys: Keys, tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            SCRIPT,
            "--robot",
            "sim:arm_reach",
            "--key",
            keys.secret("robot"),
            "--allow",
            str(keys.allow),
            "--endpoint",
            "tcp://127.0.0.1:0",
            "--max-ticks",
            "25",
            "--camera",
            "scene",
            "--camera-every",
            "5",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={"MUJOCO_GL": "egl", "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert doc["rc"] == 0
    loaded = [
        m for m in doc["modules"] if m.split(".")[0] == "torch" or m.startswith(LEARNER_STACK[1:])
    ]
    assert loaded == [], f"the robot host imported {loaded[:10]}"
    assert "unilab.teleop.robot_host" in doc["modules"] and "msgpack" in doc["modules"]
    assert "25 ticks" in out.stdout


BLOCKED = ("torch", "mujoco", "omegaconf", "yaml", "zarr", "onnxruntime", "onnx", "cv2", "rerun")
LEROBOT_ENV_SCRIPT = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None  # importing any of these now fails, as in a bare environment
from unilab.teleop.robot_host import main
sys.exit(main(sys.argv[2:]))
"""


def test_robot_host_for_lerobot_needs_only_numpy_zmq_msgpack(keys: Keys) -> None:
    """What LeRobot's environment has (`pip install --no-deps` of unilab there): with the
    simulator, config, storage, ONNX, video and viewer packages unimportable, the robot
    host still starts and reaches the LeRobot driver, which reports the missing arm."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            LEROBOT_ENV_SCRIPT,
            ",".join(BLOCKED),
            "--robot",
            "lerobot:so101_follower:/dev/ttyUNILAB_NONE",
            "--key",
            keys.secret("robot"),
            "--allow",
            str(keys.allow),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert "no device at /dev/ttyUNILAB_NONE" in out.stderr and "Traceback" not in out.stderr
