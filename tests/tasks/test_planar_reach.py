"""planar_reach: targets in their reset cells, a solvable task, the sparse reward, clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from unilab.tasks.planar_reach import PlanarReach, PlanarReachConfig
from unilab.tasks.registry import make_task

LINK = 0.12


def joint_targets(points: np.ndarray) -> np.ndarray:
    """(n, 2) shoulder and elbow angles putting the fingertip on points (inverse kinematics
    of two equal links, elbow bent positive), the shoulder wrapped into its range."""
    r2 = np.sum(np.square(points), axis=1)
    elbow = np.arccos(np.clip((r2 - 2 * LINK**2) / (2 * LINK**2), -1.0, 1.0))
    shoulder = np.arctan2(points[:, 1], points[:, 0]) - elbow / 2
    return np.stack([np.arctan2(np.sin(shoulder), np.cos(shoulder)), elbow], axis=1)


def polar(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.linalg.norm(points, axis=1), np.arctan2(points[:, 1], points[:, 0])


def test_targets_fall_in_their_radius_band_and_angle_sector() -> None:
    task = make_task(PlanarReachConfig(target_bins=[2, 4]), num_envs=64, seed=0)
    assert isinstance(task, PlanarReach) and task.num_reset_bins == 8
    for band in range(2):
        for sector in range(4):
            task.bin_probs = np.eye(8, dtype=np.float32)[4 * band + sector]
            task.reset()
            radius, angle = polar(task.target)
            assert ((radius >= 0.06 + 0.08 * band) & (radius <= 0.14 + 0.08 * band)).all()
            # sector k is centred on k quarter turns from the start direction (+x)
            offset = np.arctan2(
                np.sin(angle - sector * np.pi / 2), np.cos(angle - sector * np.pi / 2)
            )
            assert (np.abs(offset) <= np.pi / 4 + 1e-9).all()
            assert np.ptp(offset) > 0.5 * np.pi / 2  # spread over the sector
    whole = make_task(PlanarReachConfig(), num_envs=512, seed=1)
    whole.reset()
    radius, angle = polar(whole.target)
    assert radius.min() >= 0.06 and radius.max() <= 0.22
    # uniform over the ring's area: half the targets beyond the radius halving it
    assert np.mean(radius > np.sqrt((0.06**2 + 0.22**2) / 2)) == pytest.approx(0.5, abs=0.07)
    assert (angle < -2.5).any() and (angle > 2.5).any()


def test_joint_targets_from_inverse_kinematics_reach_every_cell() -> None:
    """The task is solvable everywhere, the shoulder's limit included: commanding the
    inverse-kinematics angles ends every episode on target, with the sparse reward paid."""
    cfg = PlanarReachConfig(
        target_bins=[2, 4], episode_length_s=2.0, reward_weights={"success": 1.0}
    )
    task = make_task(cfg, num_envs=64, seed=3)
    task.reset()
    paid = np.zeros(64)
    for _ in range(task.max_episode_steps - 1):
        out = task.step(joint_targets(task.target).astype(np.float32))
        paid += out.reward_terms["success"]
    assert not (out.terminated | out.truncated).any()
    assert (task.task_metrics()["success"] == 1.0).all(), task.distance.max()
    assert set(task.episode_bin.tolist()) == set(range(8))
    assert (paid > 0).all()
    out = task.step(joint_targets(task.target).astype(np.float32))  # the last step
    assert out.truncated.all() and (out.extras["success"] == 1.0).all()


def test_a_zero_action_holds_the_stretched_out_start_pose() -> None:
    task = make_task(PlanarReachConfig(init_joint_noise=0.0), num_envs=4, seed=0)
    task.reset()
    for _ in range(50):
        task.step(np.zeros((4, 2), np.float32))
    np.testing.assert_allclose(task.fingertip, np.tile([0.24, 0.0], (4, 1)), atol=1e-3)
    assert task.observe()["policy"].shape == (4, 14)


def test_the_marker_shows_each_env_target() -> None:
    task = make_task(PlanarReachConfig(), num_envs=8, seed=0)
    task.reset()
    marker = task.sim.bind("mocap_pos")[:, 0]
    np.testing.assert_allclose(marker[:, :2], task.target)


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ({"target_radius": [0.1, 0.3]}, "target_radius"),
        ({"target_radius": [0.2, 0.1]}, "target_radius"),
        ({"target_radius": [0.1]}, "target_radius"),
        ({"target_bins": [2, 0]}, "target_bins"),
        ({"target_bins": [2, 2, 2]}, "target_bins"),
        ({"success_tolerance": 0.0}, "success_tolerance"),
        ({"fine_tracking_sigma": -1.0}, "fine_tracking_sigma"),
    ],
)
def test_bad_settings_are_refused_by_name(override: dict[str, object], key: str) -> None:
    with pytest.raises(ValueError, match=key):
        make_task(PlanarReachConfig(**override), num_envs=1)  # type: ignore[arg-type]
