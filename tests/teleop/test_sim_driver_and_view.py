"""The simulated robot driver (limits, hold, cameras from a child renderer), and a short
station run with a camera: frames reach the store and a Rerun .rrd is written."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from hil_fixtures import Keys, running_host

from unilab.data import EpisodeStore
from unilab.deploy.sim_driver import SimDriver, SimDriverError
from unilab.robots.interface import RobotDriver
from unilab.teleop.link import ClientLink
from unilab.teleop.live_view import LiveView
from unilab.teleop.policy_runner import PolicyMismatchError, load_hil_policy
from unilab.teleop.station import OperatorStation
from unilab.teleop.virtual_operator import VirtualOperator


def test_sim_driver_limits_hold_and_cameras() -> None:
    d = SimDriver("arm_reach", cameras=("scene",), camera_height=24, camera_width=32)
    d.connect()
    try:
        assert isinstance(d, RobotDriver)
        low, high = d.joint_limits
        assert (
            low.shape == (7,) and np.all(low >= -3.0) and np.all(high <= 3.0) and np.all(low < high)
        )
        assert low[1] > -3.0  # joint2's range is tighter than the action clip
        target = np.clip(np.full(7, 0.4, np.float32), low, high)
        for _ in range(150):
            d.act(target)
        np.testing.assert_allclose(d.hold_action(), target, atol=0.05)
        assert np.array_equal(d.safe_stop(), d.hold_action())
        frames: dict[str, np.ndarray] = {}
        end = time.monotonic() + 30  # the child renderer starts in a second or two
        while not frames and time.monotonic() < end:
            d.act(target)
            frames = d.read_cameras()
            time.sleep(0.02)
        assert frames and frames["scene"].shape == (24, 32, 3) and frames["scene"].std() > 0
        assert d.camera_error == ""
    finally:
        d.disconnect()
    with pytest.raises(SimDriverError, match="no camera"):
        SimDriver("arm_reach", cameras=("wrist_cam",)).connect()


def test_station_records_camera_frames_and_rerun(
    keys: Keys, demo_policy: Path, tmp_path: Path
) -> None:
    # A 50-period watchdog: a stall on a busy box must not cut the episode this test saves.
    with running_host(keys, cameras=("scene",), camera_every=2, watchdog_periods=50) as host:
        end = time.monotonic() + 60  # the camera process renders its first frame first
        while host.camera_seq == 0 and time.monotonic() < end:
            time.sleep(0.05)
        link = ClientLink(
            host.sockets.command_endpoint,
            secret_key=keys.secret("alice"),
            server_key=keys.public("robot"),
            sender="station",
        )
        rrd = tmp_path / "session.rrd"
        station = OperatorStation(
            link,
            policy=load_hil_policy(demo_policy),
            device=VirtualOperator(0, horizon=60),
            store=tmp_path / "cam.zarr",
            operator="alice",
            live_view=LiveView(str(rrd)),
            auto_resume=True,
        )
        station.connect()
        # Save the episode after 60 frames (the virtual operator's script).
        station.device.script[(0, 60)] = "save"  # type: ignore[union-attr]
        report = station.run(max_episodes=1, duration_s=30)
        link.close()
    assert report.episodes_saved == 1
    with EpisodeStore.open(tmp_path / "cam.zarr") as store:
        images = store.episode(0, ["images/scene"])["images/scene"]
    assert images.shape == (60, 48, 64, 3) and images[-1].std() > 0
    assert rrd.stat().st_size > 10_000 and rrd.read_bytes()[:4] == b"RRF2"


def test_policy_must_fit_the_robot(demo_policy: Path) -> None:
    policy = load_hil_policy(demo_policy)
    robot = {"action_names": ["a"] * 6, "obs_dims": {"policy": 30}}
    with pytest.raises(PolicyMismatchError, match="outputs 7 actions"):
        policy.check_robot(robot)
    with pytest.raises(PolicyMismatchError, match=r"no policy\.onnx"):
        load_hil_policy(demo_policy.parent / "nope")


def test_chunked_policy_runs_open_loop_and_reports_success() -> None:
    """A VLA-style policy returns (H, A) chunks and a predicted success: one action per
    tick from the chunk, a new call only when it is used up or after reset()."""
    from unilab.teleop.policy_runner import HilPolicy

    calls = []

    def vla(obs: dict[str, np.ndarray]) -> dict[str, object]:
        calls.append(1)
        base = float(len(calls))
        return {
            "actions": np.full((3, 2), base) + np.arange(3)[:, None],
            "predicted_success": [0.25 * base],
        }

    policy = HilPolicy(vla)
    steps = [policy({}) for _ in range(4)]
    assert [s.action[0] for s in steps] == [1.0, 2.0, 3.0, 2.0] and len(calls) == 2
    assert steps[0].predicted_success == 0.25 and steps[3].predicted_success == 0.5
    policy.reset()
    assert policy({}).action[0] == 3.0 and len(calls) == 3
