"""Bad robot input fails with one clear error: missing file, malformed XML, wrong names."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from unilab.robots import get_robot
from unilab.robots.spec import RobotSpec
from unilab.robots.validate import RobotModelError, load_model, validate_spec


def test_missing_mjcf_file_names_the_path_and_robot(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "scene.xml"
    spec = dataclasses.replace(get_robot("cartpole"), mjcf=missing)
    with pytest.raises(FileNotFoundError) as err:
        load_model(spec)
    msg = str(err.value)
    assert "'cartpole'" in msg and str(missing) in msg and "does not exist" in msg


def test_malformed_xml_passes_on_mujocos_message(tmp_path: Path) -> None:
    bad = tmp_path / "broken.xml"
    bad.write_text("<mujoco><worldbody><body></mujoco>")
    spec = dataclasses.replace(get_robot("cartpole"), mjcf=bad)
    with pytest.raises(RobotModelError) as err:
        load_model(spec)
    msg = str(err.value)
    assert isinstance(err.value, ValueError)
    assert str(bad) in msg and "'cartpole'" in msg
    assert "XML parse error" in msg and "MISMATCHED_ELEMENT" in msg  # MuJoCo's own words


def test_joint_name_not_in_model_names_it_and_the_closest_valid_names() -> None:
    spec = get_robot("quadruped")
    names = ("FR_hipp", *spec.joint_names[1:])
    bad = dataclasses.replace(spec, joint_names=names)
    model = load_model(spec)
    with pytest.raises(ValueError) as err:
        validate_spec(bad, model)
    msg = str(err.value)
    assert "'quadruped'" in msg
    assert "joint 'FR_hipp' not found" in msg
    assert "closest valid joint names: FR_hip" in msg
    assert msg.count("not found") == 1  # only the wrong name is reported


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        (
            "sensors",
            {"gyro": "imu_gyr"},
            "sensor 'imu_gyr' not found; closest valid sensor names: imu_gyro",
        ),
        ("feet", ("FR_feet",), "geom 'FR_feet' not found; closest valid geom names: FR_foot"),
        ("base_body", "trunc", "body 'trunc' not found; closest valid body names: trunk"),
        ("sites", {"imu": "imu_site"}, "site 'imu_site' not found; closest valid site names: imu"),
        ("keyframe", "stand", "key 'stand' not found"),
    ],
)
def test_every_kind_of_name_is_checked(field: str, value: Any, expected: str) -> None:
    spec = get_robot("quadruped")
    with pytest.raises(RobotModelError, match=expected):
        validate_spec(dataclasses.replace(spec, **{field: value}), load_model(spec))


def test_gains_that_differ_from_the_mjcf_are_reported() -> None:
    spec = get_robot("quadruped")
    bad = dataclasses.replace(spec, kp=(20.0,) * 12)
    with pytest.raises(
        RobotModelError, match=r"actuator 'FR_hip': kp=40, kv=1 in the MJCF, kp=20, kd=1"
    ):
        validate_spec(bad, load_model(spec))


def test_default_pose_that_differs_from_the_keyframe_is_reported() -> None:
    spec = get_robot("arm")
    pose = (0.1, *spec.default_pose[1:])
    with pytest.raises(
        RobotModelError, match=r"keyframe 'home': joint 'joint1' is 0, default_pose says 0.1"
    ):
        validate_spec(dataclasses.replace(spec, default_pose=pose), load_model(spec))


def test_joint_range_that_differs_from_the_mjcf_is_reported() -> None:
    spec = get_robot("humanoid")
    lower = (-1.0, *spec.joint_lower[1:])
    with pytest.raises(
        RobotModelError, match=r"joint 'left_hip_yaw': range \[-0.43, 0.43\] in the MJCF"
    ):
        validate_spec(dataclasses.replace(spec, joint_lower=lower), load_model(spec))


def test_an_actuator_left_out_of_the_spec_is_reported() -> None:
    spec = get_robot("arm")
    with pytest.raises(
        RobotModelError, match=r"actuator 'gripper' is in the MJCF but not in the spec"
    ):
        validate_spec(dataclasses.replace(spec, gripper_actuator=None), load_model(spec))


def test_spec_with_mismatched_lengths_or_unknown_control_mode_is_rejected() -> None:
    spec = get_robot("cartpole")
    with pytest.raises(ValueError, match=r"robot 'cartpole': kp has 2 entries, joint_names has 1"):
        dataclasses.replace(spec, kp=(0.0, 0.0))
    with pytest.raises(ValueError, match=r"control_mode 'torque' is not one of position, force"):
        dataclasses.replace(spec, control_mode="torque")


def test_validation_is_against_the_model_it_is_given() -> None:
    # The cart-pole spec against the quadruped model: every cart-pole name is missing.
    spec: RobotSpec = get_robot("cartpole")
    with pytest.raises(
        RobotModelError, match=r"robot 'cartpole': \d+ name\(s\) in the spec are not in"
    ):
        validate_spec(spec, load_model(get_robot("quadruped")))
