"""unilab: robot learning on batched MuJoCo with a heterogeneous CPU-sim / accelerator-learner loop."""

import os as _os
import sys as _sys

__version__ = "0.1.0"

# MuJoCo picks its GL backend at import: on a headless Linux box, offscreen rendering
# (videos) works through EGL, and only if this is set before mujoco is first imported.
if _sys.platform.startswith("linux") and not (
    _os.environ.get("DISPLAY") or _os.environ.get("WAYLAND_DISPLAY")
):
    _os.environ.setdefault("MUJOCO_GL", "egl")
