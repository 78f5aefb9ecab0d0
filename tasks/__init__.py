"""Tasks: observations, rewards, terminations and resets, batched over envs. Importing this
package registers every task."""

from unilab.tasks import arm_around_obstacle as arm_around_obstacle
from unilab.tasks import arm_lift_cube as arm_lift_cube
from unilab.tasks import arm_move_side as arm_move_side
from unilab.tasks import arm_move_to_goal as arm_move_to_goal
from unilab.tasks import arm_pick_place as arm_pick_place
from unilab.tasks import arm_reach as arm_reach
from unilab.tasks import arm_stack as arm_stack
from unilab.tasks import cartpole_balance
from unilab.tasks import humanoid_walk as humanoid_walk
from unilab.tasks import mjcf as mjcf
from unilab.tasks import planar_reach as planar_reach
from unilab.tasks import quadruped_joystick as quadruped_joystick
from unilab.tasks.registry import TASKS, make_task, register_task

__all__ = ["TASKS", "cartpole_balance", "make_task", "register_task"]
