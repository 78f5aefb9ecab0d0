"""Takeovers in simulation: the task's scripted expert takes an episode over from the policy.

On a real robot a person takes over when the policy is about to fail (HIL); the frames
from then on are human interventions (`is_intervention`), which `awr_flow` learns from as
demonstrations. `ExpertTakeover` is that loop in simulation, with the scripted expert as
the person: an episode still running after `after_steps` control steps (it has neither
succeeded nor ended), or (`off_track=True`) one in which the expert sees the policy make a
mistake (a missed grasp), is driven by the expert for the rest of the episode. At takeover the
expert starts a new plan and then `resume`s it from the present state: a cube already in
the hand is carried on, otherwise it approaches the object where it now is. What it records
is a recovery from the policy's own mistakes, the states imitation alone never shows
(HG-DAgger, Kelly et al. 2019).

`rollout(..., takeover=...)` asks it for the executed actions each step; it returns them
with a per-env intervention mask, which `StepInfo.intervention` carries to the recorders.
"""

from __future__ import annotations

import numpy as np

from unilab.tasks.experts.base import ScriptedExpert


def trigger_problem(
    expert: type[ScriptedExpert], task_name: str, timed: bool, off_track: bool
) -> str | None:
    """Why takeovers by `expert` (a class) with these triggers would never come, or None:
    no trigger at all, or only the mistake trigger with an expert that cannot judge any."""
    if not timed and not off_track:
        return "a takeover needs a trigger: a time (after S seconds), mistakes, or both"
    if off_track and not timed and not expert.judges_mistakes:
        return (
            f"{expert.__name__} cannot tell the policy's mistakes (task {task_name!r}), so a "
            "takeover on them alone would never come; add a time trigger (after S seconds)"
        )
    return None


class ExpertTakeover:
    """The expert drives each episode from its `after_steps`-th step on, or (`off_track`)
    from the step it sees the policy make a mistake (`ScriptedExpert.off_track`: for the
    pick-and-place experts, a missed grasp), whichever comes first (see module doc)."""

    def __init__(
        self, expert: ScriptedExpert, after_steps: int | None = None, off_track: bool = False
    ) -> None:
        problem = trigger_problem(
            type(expert), expert.task.cfg.name, after_steps is not None, off_track
        )
        if problem:
            raise ValueError(problem)
        if after_steps is not None and after_steps < 0:
            raise ValueError(f"after_steps={after_steps} must be >= 0 (control steps)")
        self.expert = expert
        self.task = expert.task
        self.after_steps = None if after_steps is None else int(after_steps)
        self.off_track = off_track
        self.taken = np.zeros(self.task.num_envs, dtype=bool)
        """(N,) envs whose current episode the expert drives."""

    def __call__(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The actions to execute this step and the (N,) intervention mask, from the
        policy's `actions` (N, action_dim)."""
        step = self.task.episode_step
        self.taken &= step > 0  # a new episode starts with the policy
        due = np.zeros_like(self.taken)
        if self.after_steps is not None:
            due |= step >= self.after_steps
        if self.off_track:
            due |= self.expert.off_track(actions)  # watched every step: it counts steps
        start = (~self.taken) & due
        if start.any():
            envs = np.flatnonzero(start)
            self.expert.start(envs)
            self.expert.resume(envs)
            self.taken |= start
        if not self.taken.any():
            return actions, self.taken.copy()
        expert_actions = self.expert.act()
        executed = np.where(self.taken[:, None], expert_actions, actions).astype(actions.dtype)
        return executed, self.taken.copy()
