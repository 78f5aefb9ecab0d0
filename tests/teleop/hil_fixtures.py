"""Names the HIL tests import (their helpers live in unilab.teleop.session_tools, which
the benchmark uses too)."""

from __future__ import annotations

from unilab.teleop.session_tools import KeySet
from unilab.teleop.session_tools import host_in_thread as running_host

Keys = KeySet

__all__ = ["Keys", "running_host"]
