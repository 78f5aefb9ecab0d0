"""Teleop devices: the keyboard through a real pseudo-terminal, the virtual operator, and
clear errors when a device, its package, a terminal or the hardware is absent."""

from __future__ import annotations

import importlib.util
import os
import pty
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hil_fixtures import Keys

from unilab.robots.lerobot_compat import LeRobotUnavailableError
from unilab.teleop.devices import (
    DISCARD,
    QUIT,
    RERECORD,
    SAVE,
    STOP,
    SUCCESS,
    TAKEOVER,
    ActionSpace,
    DeviceUnavailableError,
    make_device,
)
from unilab.teleop.keyboard import KeyboardDevice
from unilab.teleop.virtual_operator import VirtualOperator

SPACE = ActionSpace(
    ("a", "b", "c"),
    np.full(3, -1.0, np.float32),
    np.full(3, 1.0, np.float32),
    np.full(3, 0.2, np.float32),
)


def test_keyboard_in_a_terminal() -> None:
    master, slave = pty.openpty()
    kb = KeyboardDevice(fd=slave)
    try:
        kb.connect(SPACE)
        kb.start(np.array([0.5, 0.0, -0.5], np.float32))
        os.write(master, b"qqa ")
        got = kb.poll(0, {}, 0.02)
        np.testing.assert_allclose(got.action, [0.5 + 0.08 + 0.08 - 0.08, 0.0, -0.5], atol=1e-6)
        assert got.events == [TAKEOVER]
        os.write(master, b"ww\r\x7fbnx\x03")
        got = kb.poll(1, {}, 0.02)
        assert got.events == [SAVE, DISCARD, RERECORD, SUCCESS, STOP, QUIT]
        np.testing.assert_allclose(got.action, [0.58, 0.16, -0.5], atol=1e-6)
        os.write(master, b"w" * 100)  # held key: the target stops at the limit
        assert kb.poll(2, {}, 0.02).action[1] == pytest.approx(1.0)
        os.write(master, b" ")
        assert kb.poll(3, {}, 0.02).events == [TAKEOVER]
    finally:
        kb.close()
        os.close(master)
        os.close(slave)


def test_keyboard_needs_a_terminal(tmp_path: Path) -> None:
    with open(tmp_path / "f", "w+") as fh, pytest.raises(DeviceUnavailableError, match="not a TTY"):
        KeyboardDevice(fd=fh.fileno()).connect(SPACE)


@pytest.mark.skipif(
    importlib.util.find_spec("pygame") is not None,
    reason="pygame installed: see the no-gamepad error",
)
def test_gamepad_without_pygame() -> None:
    with pytest.raises(DeviceUnavailableError, match=r"unilab\[gamepad\]"):
        make_device("gamepad").connect(SPACE)


@pytest.mark.skipif(
    importlib.util.find_spec("pyspacemouse") is not None, reason="pyspacemouse installed"
)
def test_spacemouse_without_package() -> None:
    with pytest.raises(DeviceUnavailableError, match=r"unilab\[spacemouse\]"):
        make_device("spacemouse").connect(SPACE)


def test_leader_arm_and_lerobot_follower_absent(tmp_path: Path) -> None:
    with pytest.raises(LeRobotUnavailableError, match="no device at /dev/ttyUNILAB_NONE"):
        make_device("leader:so101_leader:/dev/ttyUNILAB_NONE").connect(SPACE)
    port = tmp_path / "ttyFAKE"  # a port that exists: the next thing missing is lerobot
    port.touch()
    if importlib.util.find_spec("lerobot") is None:
        with pytest.raises(LeRobotUnavailableError, match="lerobot package is not installed"):
            make_device(f"leader:so101_leader:{port}").connect(SPACE)
    from unilab.robots.lerobot_follower import LeRobotDriver

    with pytest.raises(LeRobotUnavailableError, match="no device at /dev/ttyUNILAB_NONE"):
        LeRobotDriver("so101_follower", "/dev/ttyUNILAB_NONE").connect()
    with pytest.raises(DeviceUnavailableError, match="expected keyboard"):
        make_device("joystick")
    with pytest.raises(DeviceUnavailableError, match="leader:<type>:<port>"):
        make_device("leader:so101_leader")


def test_robot_host_cli_errors(keys: Keys, tmp_path: Path) -> None:
    base = [
        sys.executable,
        "-m",
        "unilab.teleop.robot_host",
        "--key",
        keys.secret("robot"),
        "--allow",
        str(keys.allow),
    ]
    cases = {
        "lerobot:so101_follower:/dev/ttyUNILAB_NONE": "no device at /dev/ttyUNILAB_NONE",
        "sim:no_such_task": "no_such_task",
        "ros:arm": "expected sim:<task>",
    }
    if importlib.util.find_spec("lerobot") is None:
        (tmp_path / "tty").touch()
        cases[f"lerobot:so101_follower:{tmp_path / 'tty'}"] = "lerobot package is not installed"
    for robot, text in cases.items():
        out = subprocess.run([*base, "--robot", robot], capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and text in out.stderr, (robot, out.stderr[-1500:])
        assert "Traceback" not in out.stderr


def test_virtual_operator_schedule_and_motion() -> None:
    vo = VirtualOperator(7, horizon=100, script={(0, 50): SAVE})
    vo.connect(SPACE)
    spans = vo.spans(0)
    assert spans == VirtualOperator(7, horizon=100).spans(0) and spans[0][0] >= 5
    assert all(b <= 100 for _, b in spans)
    vo.begin_episode(0)
    toggles, last = [], np.zeros(3, np.float32)
    for frame in range(100):
        got = vo.poll(frame, {}, 0.02)
        if TAKEOVER in got.events:
            toggles.append(frame)
            vo.start(got.action)
        assert (
            got.action is not None and np.all(np.abs(got.action - last) <= 0.2 * 0.3 + 1e-6)
        ) or TAKEOVER in got.events
        last = got.action
    assert toggles == [f for span in spans for f in span]
    assert (0, 50, SAVE) in vo.pressed
    assert vo.expected_labels(0, 100).sum() == sum(b - a for a, b in spans)
