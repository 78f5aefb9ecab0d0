"""Camera frames of a simulated robot, rendered in a child process.

MuJoCo's renderer holds the GIL while it draws (measured: a render thread opened 20 ms
gaps in the control loop on a software renderer), so a simulated robot host renders in a
separate process, as a real camera captures on its own hardware. The parent writes the
model to a temporary `.mjb`, starts `python -m unilab.deploy.sim_camera`, and exchanges raw
bytes over the child's stdin/stdout (no pickle): a request is the state vector
(qpos, mocap_pos, mocap_quat as float64), the answer is every camera's frame, uint8,
concatenated in the order of `names`. One request is in flight at a time; `latest()`
returns the newest complete frames.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

import mujoco
import numpy as np

SCENE_CAMERA = "scene"


def _state_size(model: mujoco.MjModel) -> int:
    return int(model.nq + 3 * model.nmocap + 4 * model.nmocap)


def _read_exact(stream: object, n: int) -> bytes | None:
    buf = bytearray()
    read = stream.read  # type: ignore[attr-defined]
    while len(buf) < n:
        chunk = read(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


class CameraProcess:
    """Renders states of `model` for cameras `names` in a child process."""

    def __init__(
        self, model: mujoco.MjModel, names: Sequence[str], height: int, width: int
    ) -> None:
        self.names = tuple(names)
        self.shape = (int(height), int(width), 3)
        self._frame_bytes = int(np.prod(self.shape))
        self._tmp = tempfile.TemporaryDirectory(prefix="unilab-cam-")
        path = Path(self._tmp.name) / "model.mjb"
        mujoco.mj_saveModel(model, str(path), None)
        env = dict(os.environ)
        env.setdefault("MUJOCO_GL", "egl")
        self._proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "unilab.deploy.sim_camera",
                str(path),
                str(height),
                str(width),
                *self.names,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        self._lock = threading.Lock()
        self._idle = threading.Event()
        self._idle.set()
        self._frames: dict[str, np.ndarray] = {}
        self.rendered = 0
        self.error = ""
        self._reader = threading.Thread(target=self._read, name="sim-camera-reader", daemon=True)
        self._reader.start()

    def request(self, data: mujoco.MjData) -> None:
        """Ask for frames of this state unless a render is still running."""
        if not self._idle.is_set() or self._proc.poll() is not None:
            return
        state = np.concatenate([data.qpos, data.mocap_pos.ravel(), data.mocap_quat.ravel()]).astype(
            "<f8"
        )
        self._idle.clear()
        try:
            assert self._proc.stdin is not None
            self._proc.stdin.write(state.tobytes())
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            self.error = f"camera process is gone: {exc}"

    def _read(self) -> None:
        out = self._proc.stdout
        total = self._frame_bytes * len(self.names)
        while True:
            blob = _read_exact(out, total)
            if blob is None:
                err = self._proc.stderr.read().decode(errors="replace") if self._proc.stderr else ""
                self.error = self.error or f"camera process ended: {err.strip()[-500:]}"
                return
            frames = {
                name: np.frombuffer(
                    blob, np.uint8, self._frame_bytes, i * self._frame_bytes
                ).reshape(self.shape)
                for i, name in enumerate(self.names)
            }
            with self._lock:
                self._frames = frames
                self.rendered += 1
            self._idle.set()

    def latest(self) -> dict[str, np.ndarray]:
        with self._lock:
            return dict(self._frames)

    def close(self) -> None:
        if self._proc.stdin is not None:
            with contextlib.suppress(OSError):
                self._proc.stdin.close()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._reader.join(timeout=5)
        for stream in (self._proc.stdout, self._proc.stderr):
            if stream is not None:
                stream.close()
        self._tmp.cleanup()


def main(argv: list[str] | None = None) -> int:
    """Child side: read states from stdin, write frames to stdout, until stdin closes."""
    args = list(sys.argv[1:] if argv is None else argv)
    path, height, width, names = args[0], int(args[1]), int(args[2]), args[3:]
    from unilab.viz.video import SceneCamera

    model = mujoco.MjModel.from_binary_path(path)
    data = mujoco.MjData(model)
    cams = [
        SceneCamera(model, width=width, height=height, camera=None if n == SCENE_CAMERA else n)
        for n in names
    ]
    size = _state_size(model)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    nq, nm = model.nq, model.nmocap
    while True:
        blob = _read_exact(stdin, 8 * size)
        if blob is None:
            break
        state = np.frombuffer(blob, "<f8")
        data.qpos[:] = state[:nq]
        data.mocap_pos[:] = state[nq : nq + 3 * nm].reshape(nm, 3)
        data.mocap_quat[:] = state[nq + 3 * nm :].reshape(nm, 4)
        mujoco.mj_forward(model, data)
        for cam in cams:
            stdout.write(np.ascontiguousarray(cam.render(data), np.uint8).tobytes())
        stdout.flush()
    for cam in cams:
        cam.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
