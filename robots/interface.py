"""The one interface every robot, simulated or real, offers a controller.

A controller (the deploy loop, the HIL operator station) only ever calls these five
members, at the robot's control rate:

- `control_dt`: seconds between two actions (the rate the policy was trained at);
- `reset()`: bring the robot to its start state; returns the first observation;
- `observe()`: the newest observation, `{group: (d,) float32}` with the groups the policy
  was trained on (at least `policy`), in the layout of the export metadata's `obs_dims`;
- `act(action)`: apply one (action_dim,) action in policy units (a driver maps it to joint
  targets with the metadata's default_pose, action_scale, kp and kd); must not block for
  longer than a control period;
- `close()`: release the hardware (or the simulator).

`unilab.deploy.sim_robot.SimRobot` implements it over one env of a registered task. A real driver implements the
same members; nothing else in a controller changes.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Robot(Protocol):
    @property
    def control_dt(self) -> float: ...

    def reset(self) -> dict[str, np.ndarray]: ...

    def observe(self) -> dict[str, np.ndarray]: ...

    def act(self, action: np.ndarray) -> None: ...

    def close(self) -> None: ...
