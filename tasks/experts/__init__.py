"""Scripted experts for the tabletop family: state-based controllers that solve each task
with a strategy ("mode") drawn per episode, batched over all envs of a task.

    expert = make_expert(task, seed=0)
    task.reset(); expert.reset()
    for _ in range(steps):
        result = task.step(expert.act())
        done = np.flatnonzero(result.terminated | result.truncated)
        expert.reset(done)          # the task auto-reset those envs: draw new modes
    expert.mode                     # (n,) int64 strategy per env: ground truth, never an input

Importing this package registers every expert.
"""

from unilab.tasks.experts import (
    around_obstacle as around_obstacle,
)
from unilab.tasks.experts import (
    move_side as move_side,
)
from unilab.tasks.experts import (
    move_to_goal as move_to_goal,
)
from unilab.tasks.experts import (
    pick_place as pick_place,
)
from unilab.tasks.experts import (
    stack as stack,
)
from unilab.tasks.experts.base import (
    EXPERTS,
    ScriptedExpert,
    make_expert,
    mode_probs_from_shares,
)

__all__ = ["EXPERTS", "ScriptedExpert", "make_expert", "mode_probs_from_shares"]
