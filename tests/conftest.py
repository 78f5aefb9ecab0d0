"""Test-wide setup: offscreen rendering through EGL (MuJoCo picks its GL backend when it is
first imported, so this must run before any test module imports mujoco)."""

import os

os.environ.setdefault("MUJOCO_GL", "egl")
