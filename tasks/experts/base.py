"""Scripted experts: batched phase machines over the privileged state of a tabletop task.

Every env runs its own phase (approach, descend, close, lift, carry, ...), but the code
loops over phases, never over envs: each phase computes the waypoints of the envs in it
with numpy, and a mask moves the envs that reached theirs to the next phase. The output is
the task's own action (setpoint displacement, yaw change, gripper), so an expert is a
policy like any other and its episodes are demonstrations in the policy's action units.

Modes: each episode draws a strategy (`mode`, an int per env; names in `mode_names`),
e.g. which bowl or which way around a wall. Per-episode noise (speed, heights, waypoint
offsets) varies the demonstrations within a mode. `reset(ids, seeds=...)` draws them from
each episode's own generator (`episode_rng(seed, EXPERT_STREAM)`), so with the task's
`episode_seeder` giving the same seeds an episode replays from its seed alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar, TypeVar

import numpy as np
import numpy.typing as npt

from unilab.registry import Registry
from unilab.sim.indices import as_env_ids
from unilab.tasks.base import EXPERT_STREAM, PERTURB_STREAM, episode_rng
from unilab.tasks.tabletop import TabletopTask
from unilab.tasks.tabletop_geometry import wrap_angle
from unilab.tasks.tabletop_scene import CUBE_HALF

EXPERTS: Registry[type[ScriptedExpert]] = Registry("expert")


ExpertT = TypeVar("ExpertT", bound="type[ScriptedExpert]")


def register_expert(task_name: str) -> Callable[[ExpertT], ExpertT]:
    """Class decorator: the expert for the task registered as task_name."""

    def decorator(cls: ExpertT) -> ExpertT:
        EXPERTS.add(task_name, cls)
        return cls

    return decorator


def make_expert(
    task: TabletopTask,
    seed: int = 0,
    action_noise: float = 0.0,
    mode_probs: Sequence[float] | None = None,
) -> ScriptedExpert:
    """The scripted expert of task's registered name, its mode draws seeded by seed;
    `action_noise` > 0 perturbs the actions it executes (see `ScriptedExpert.perturb`);
    `mode_probs` (one per mode name, summing to 1) replaces the uniform draw of modes."""
    cls = EXPERTS.get(task.cfg.name)
    expert = cls(task, seed)
    expert.set_action_noise(action_noise)
    if mode_probs is not None:
        expert.set_mode_probs(mode_probs)
    return expert


def mode_probs_from_shares(mode_names: Sequence[str], shares: Mapping[str, float]) -> list[float]:
    """Per-mode probabilities (in `mode_names` order) from {mode name: share}: shares are
    normalised, a mode not named gets 0. Raises ValueError naming the valid modes."""
    unknown = sorted(set(shares) - set(mode_names))
    if unknown:
        raise ValueError(
            f"mode shares name {', '.join(map(repr, unknown))}, not modes of this expert; "
            f"its modes: {', '.join(mode_names)}"
        )
    values = [float(shares.get(name, 0.0)) for name in mode_names]
    if any(not np.isfinite(v) or v < 0.0 for v in values) or sum(values) <= 0.0:
        raise ValueError(
            f"mode shares must be finite, >= 0 and not all 0, got {dict(shares)} "
            f"(e.g. {mode_names[0]}:0.7,{mode_names[-1]}:0.3)"
        )
    total = sum(values)
    return [v / total for v in values]


def grasp_yaw(cube_yaw: np.ndarray, turn: np.ndarray) -> np.ndarray:
    """Hand yaw that closes the fingers across a cube's faces: turn 0 takes the pair of
    faces needing the smaller wrist turn (|yaw| <= pi/4), turn 1 the other pair
    (pi/4 < |yaw| <= pi/2)."""
    other = np.where(cube_yaw >= 0, cube_yaw - np.pi / 2, cube_yaw + np.pi / 2)
    return np.where(turn == 0, cube_yaw, other)


MISSED_GRASP_STEPS = 8
"""Steps of commanded closing without the cube between the fingers that make a missed grasp
(`PickPlaceExpert.off_track`)."""
PERTURB_EVERY = 20.0
"""Mean clean steps between two perturbation bursts of a collecting expert."""
PERTURB_STEPS = 4
"""Steps each perturbation burst lasts."""


class ScriptedExpert:
    """Base: modes, phases, per-episode noise and the conversion of waypoints to actions."""

    mode_names: ClassVar[tuple[str, ...]]
    judges_mistakes: ClassVar[bool] = False
    """Whether `off_track` can flag anything (a takeover on mistakes needs it)."""

    def __init__(self, task: TabletopTask, seed: int = 0) -> None:
        self.task = task
        self.num_envs = n = task.num_envs
        self.rng = np.random.default_rng(seed)
        self.mode = np.zeros(n, dtype=np.int64)
        """(n,) strategy of each env's episode; ground truth for mode discovery."""
        self.phase = np.zeros(n, dtype=np.int64)
        self.timer = np.zeros(n, dtype=np.int64)
        """Control steps spent in the current phase."""
        self.speed = np.ones(n)
        """Per-episode fraction of the task's largest step the expert moves at."""
        self.action_noise = 0.0
        """Std of the perturbation `perturb` adds to executed motion actions (0: none)."""
        self.perturbed: np.ndarray = np.zeros(n, dtype=bool)
        """(n,) whether `perturb` changed each env's executed action at the last step."""
        self._noise_rngs = [np.random.default_rng([seed, env]) for env in range(n)]
        self._burst_left = np.zeros(n, dtype=np.int64)
        self._burst_dir = np.zeros((n, task.action_dim - 1))
        self.mode_probs: np.ndarray | None = None
        """Probability of each mode per episode (None: uniform)."""
        self.reset()

    @property
    def num_modes(self) -> int:
        return len(self.mode_names)

    def reset(
        self,
        env_ids: npt.ArrayLike | None = None,
        modes: npt.ArrayLike | None = None,
        seeds: npt.ArrayLike | None = None,
    ) -> None:
        """New episodes in env_ids (None: all): draw modes (or take `modes`, one per env or
        one for all) and noise, restart the phases. Call it after the task reset those envs
        (their objects are placed). `seeds` (one per env): draw each env's mode and noise
        from its episode's own generator instead of the expert's shared stream."""
        ids = np.arange(self.num_envs) if env_ids is None else as_env_ids(env_ids, self.num_envs)
        if ids.size == 0:
            return
        if seeds is not None:
            per_env = np.asarray(seeds, dtype=np.int64).reshape(-1)
            if per_env.shape != ids.shape:
                raise ValueError(f"seeds: expected one per env ({ids.size}), got {per_env.size}")
            chosen = None if modes is None else np.broadcast_to(np.asarray(modes), ids.shape)
            shared = self.rng
            try:
                for j, (env, seed) in enumerate(zip(ids.tolist(), per_env.tolist(), strict=True)):
                    self._noise_rngs[env] = episode_rng(seed, PERTURB_STREAM)
                    self.rng = episode_rng(seed, EXPERT_STREAM)
                    self.reset([env], None if chosen is None else chosen[j : j + 1])
            finally:
                self.rng = shared
            return
        if modes is None and self.mode_probs is None:
            self.mode[ids] = self.rng.integers(0, self.num_modes, ids.size)
        elif modes is None:
            self.mode[ids] = self.rng.choice(self.num_modes, size=ids.size, p=self.mode_probs)
        else:
            chosen = np.broadcast_to(np.asarray(modes, dtype=np.int64), ids.shape)
            if ((chosen < 0) | (chosen >= self.num_modes)).any():
                raise ValueError(
                    f"modes must be in 0..{self.num_modes - 1} ({', '.join(self.mode_names)}), "
                    f"got {sorted(set(chosen.tolist()))}"
                )
            self.mode[ids] = chosen
        self.phase[ids] = 0
        self.timer[ids] = 0
        self._burst_left[ids] = 0
        self.speed[ids] = self.rng.uniform(0.6, 1.0, ids.size)
        self.on_reset(ids)

    def on_reset(self, ids: np.ndarray) -> None:
        """Per-episode plan of envs ids (after their modes are drawn)."""

    def start(self, ids: np.ndarray) -> None:
        """New plans for envs ids from the task's own per-episode seeds when it has them
        (`Task.episode_seed` >= 0: the episode replays from its seed), else the shared
        stream: what a policy wrapping the expert calls when it first acts in an episode."""
        seeds = self.task.episode_seed[ids]
        self.reset(ids, seeds=seeds if (seeds >= 0).all() else None)

    def resume(self, ids: np.ndarray) -> None:
        """Take over envs ids' episodes mid-way (`unilab.runtime.takeover`), after `reset`:
        pick the phase (and mode) that continues from the present state instead of starting
        over. The base keeps phase 0, which is right while nothing is held."""

    def off_track(self, actions: np.ndarray) -> np.ndarray:
        """(n,) envs whose policy, executing `actions` (n, action_dim) this step, has made a
        mistake this expert can see (a takeover's trigger, `unilab.runtime.takeover`). The
        base sees none; call it once per step."""
        return np.zeros(self.num_envs, dtype=bool)

    def set_mode_probs(self, probs: Sequence[float]) -> None:
        """Draw each new episode's mode with these probabilities (one per mode name); the
        episodes already running keep theirs."""
        p = np.asarray(probs, dtype=np.float64)
        if p.shape != (self.num_modes,) or not np.isfinite(p).all() or (p < 0).any():
            raise ValueError(
                f"mode_probs: expected {self.num_modes} probabilities >= 0 (for "
                f"{', '.join(self.mode_names)}), got {list(probs)}"
            )
        if abs(p.sum() - 1.0) > 1e-6:
            raise ValueError(f"mode_probs must sum to 1, got {p.sum():.6g} ({list(probs)})")
        self.mode_probs = p

    def set_action_noise(self, std: float) -> None:
        if not (np.isfinite(std) and std >= 0.0):
            raise ValueError(f"action_noise must be a finite std >= 0, got {std}")
        self.action_noise = float(std)

    def perturb(self, actions: np.ndarray) -> np.ndarray:
        """The actions to execute: `actions` with perturbation bursts on the motion axes
        (setpoint and yaw; the gripper command is kept), clipped to [-1, 1]; `perturbed`
        says which envs' executed actions differ this step.

        Collecting with the perturbed actions executed and the clean ones recorded (DART,
        Laskey et al. 2017) shows the learner how the expert recovers from drifts like
        those its own imitation errors cause, instead of only the expert's narrow tube of
        states. A burst (every `PERTURB_EVERY` steps on average, `PERTURB_STEPS` long) adds
        one Gaussian direction of std `action_noise`: a steady drift, as an imitation error
        is, then clean steps to recover. A chunk label is the expert's only up to the next
        perturbed step: `FrameDataset` masks the rest (the `perturbed` column). With
        `reset(seeds=...)` each env's noise comes from its episode's own stream, so an
        episode still replays from its seed."""
        if self.action_noise == 0.0:
            self.perturbed[:] = False
            return actions
        axes = actions.shape[1] - 1
        for env, rng in enumerate(self._noise_rngs):
            # The same draws every step, burst or not: an episode's noise is its seed's.
            start = rng.random() < 1.0 / PERTURB_EVERY
            direction = rng.standard_normal(axes)
            if start and self._burst_left[env] == 0:
                self._burst_dir[env] = direction
                self._burst_left[env] = PERTURB_STEPS
        self.perturbed = self._burst_left > 0
        self._burst_left[self.perturbed] -= 1
        out = actions.copy()
        drift = self.action_noise * self._burst_dir[self.perturbed]
        out[self.perturbed, :axes] = np.clip(actions[self.perturbed, :axes] + drift, -1.0, 1.0)
        return out

    def act(self) -> np.ndarray:
        """(n, 5) float32 actions for the current state; advances the phases."""
        target, yaw, grip, speed = self.plan()
        self.timer += 1
        return self.command(target, yaw, grip, speed)

    def plan(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(n, 3) fingertip waypoint, (n,) hand yaw, (n,) gripper (-1 closed, +1 open),
        (n,) speed fraction for every env; moves envs that are done to their next phase."""
        raise NotImplementedError

    # -- helpers --------------------------------------------------------------------------
    def command(
        self, target: np.ndarray, yaw: np.ndarray, grip: np.ndarray, speed: np.ndarray
    ) -> np.ndarray:
        """Actions that move the task's setpoint toward target at most speed * max_step."""
        t, cfg = self.task, self.task.cfg
        step = (target - t.ee_target) / cfg.max_step
        largest = np.abs(step).max(axis=1)
        scale = np.minimum(1.0, speed / np.maximum(largest, 1e-9))
        actions = np.empty((self.num_envs, 5), dtype=np.float32)
        actions[:, :3] = step * scale[:, None]
        actions[:, 3] = np.clip(wrap_angle(yaw - t.ee_target_yaw) / cfg.max_yaw_step, -1.0, 1.0)
        actions[:, 4] = grip
        return actions

    def reached(self, target: np.ndarray, tol: float, yaw: np.ndarray | None = None) -> np.ndarray:
        """(n,) the fingertip is within tol of target (and the hand within 0.1 rad of yaw)."""
        t = self.task
        ok: np.ndarray = np.linalg.norm(t.ee_pos - target, axis=1) < tol
        ok &= np.linalg.norm(t.ee_target - target, axis=1) < 1e-3
        if yaw is not None:
            ok &= np.abs(wrap_angle(t.ee_yaw - yaw)) < 0.1
        return ok

    def advance(self, mask: np.ndarray, to: int | np.ndarray | None = None) -> None:
        """Envs in mask go to phase `to` (None: the next one), their timers restart."""
        self.phase[mask] = self.phase[mask] + 1 if to is None else to
        self.timer[mask] = 0


class PickPlaceExpert(ScriptedExpert):
    """Grasp a cube, lift it, carry it through optional via points, set it down, let go.

    Subclasses set in on_reset: `pick` (cube index), `turn` (which pair of faces to grasp,
    see grasp_yaw), `via` (n, V, 2) via points (V = num_via), and implement place_target()
    -> ((n, 2) xy, (n,) fingertip z), read live (e.g. on top of another cube).
    """

    num_via: ClassVar[int] = 0
    judges_mistakes: ClassVar[bool] = True
    APPROACH, DESCEND, CLOSE, LIFT, VIA = 0, 1, 2, 3, 4
    """Phases; the via points take VIA..VIA+num_via-1, then TRANSPORT, LOWER, RELEASE, RETREAT."""

    def __init__(self, task: TabletopTask, seed: int = 0) -> None:
        n = task.num_envs
        self.pick = np.zeros(n, dtype=np.int64)
        self.turn = np.zeros(n, dtype=np.int64)
        self.yaw = np.zeros(n)
        """Grasp yaw: follows the cube until the fingers close, then held."""
        self.hover = np.full(n, 0.12)
        self.carry = np.full(n, 0.14)
        self.via = np.zeros((n, self.num_via, 2))
        self._closed_for: np.ndarray = np.zeros(n, dtype=np.int64)
        """(n,) steps in a row the watched policy has commanded the fingers closed."""
        v = self.VIA + self.num_via
        self.TRANSPORT, self.LOWER, self.RELEASE, self.RETREAT = v, v + 1, v + 2, v + 3
        super().__init__(task, seed)

    def on_reset(self, ids: np.ndarray) -> None:
        self.hover[ids] = self.rng.uniform(0.09, 0.14, ids.size)
        self.carry[ids] = self.rng.uniform(0.12, 0.17, ids.size)

    def place_target(self) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def holding(self, ids: np.ndarray) -> np.ndarray:
        """Those of envs ids whose hand holds their cube to pick."""
        return ids[self.task.grasped_any(self.pick)[ids]]

    def resume(self, ids: np.ndarray) -> None:
        """A cube already in the hand is carried on (LIFT: up to carry height, then on),
        the hand keeping its yaw; phase 0 would open the fingers and drop it. A hand already
        low over its cube (within the approach's 2 cm, below the hover height) descends from
        there: going back up to hover would label the states where the demonstrations
        descend with "rise", and teach the hesitation it is meant to cure."""
        t = self.task
        held = self.holding(ids)
        self.phase[held] = self.LIFT
        self.timer[held] = 0
        self.yaw[held] = t.ee_yaw[held]
        free = np.setdiff1d(ids, held)
        cube = t.cube_pos[free, self.pick[free]]
        over = np.linalg.norm(t.ee_pos[free, :2] - cube[:, :2], axis=1) < 0.02
        low = t.ee_pos[free, 2] < self.hover[free]
        self.advance(free[over & low], to=self.DESCEND)

    def off_track(self, actions: np.ndarray) -> np.ndarray:
        """A missed grasp: the policy has commanded the fingers closed for `MISSED_GRASP_STEPS`
        steps in a row (the expert's own close takes 6) and its cube is not between them: it
        closed beside the cube, or dropped it. Caught there, a takeover's recovery starts at
        the edge of the demonstrations' states, where DART's recoveries start too, instead of
        after seconds of the policy carrying nothing."""
        closing = np.asarray(actions)[:, -1] < 0.0
        fresh = self.task.episode_step == 0
        counted = np.where(fresh, 1, self._closed_for + 1)
        self._closed_for = np.where(closing, counted, 0)
        return (self._closed_for >= MISSED_GRASP_STEPS) & ~self.task.grasped_any(self.pick)

    def plan(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return self.pick_place_plan(np.ones(self.num_envs, dtype=bool))

    def pick_place_plan(
        self, active: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The plan for the envs in active (the others get a hold-still plan)."""
        t, n = self.task, self.num_envs
        rows = np.arange(n)
        cube = t.cube_pos[rows, self.pick]
        held = t.grasped_any(self.pick)
        target = t.ee_target.copy()
        grip = np.ones(n)
        speed = self.speed.copy()
        ph = self.phase
        place_xy, place_z = self.place_target()
        aiming = active & (ph <= self.DESCEND)
        self.yaw[aiming] = grasp_yaw(t.cube_yaw[rows, self.pick], self.turn)[aiming]
        yaw = self.yaw.copy()

        m = active & (ph == self.APPROACH)
        target[m, :2], target[m, 2] = cube[m, :2], self.hover[m]
        done_approach = m & self.reached(target, 0.02, yaw)

        m = active & (ph == self.DESCEND)
        target[m, :2], target[m, 2] = cube[m, :2], CUBE_HALF
        speed[m] = np.minimum(speed[m], 0.6)
        done_descend = m & self.reached(target, 0.01)

        m = active & (ph == self.CLOSE)
        grip[m] = -1.0
        done_close = m & (self.timer >= 6)

        m = active & (ph == self.LIFT)
        target[m, 2] = self.carry[m]
        grip[m] = -1.0
        done_lift = m & (t.ee_pos[:, 2] > self.carry - 0.02)
        dropped = m & (self.timer > 3) & ~held

        via_done = []
        for j in range(self.num_via):
            m = active & (ph == self.VIA + j)
            target[m, :2], target[m, 2] = self.via[m, j], self.carry[m]
            grip[m] = -1.0
            near = np.linalg.norm(t.ee_pos[:, :2] - self.via[:, j], axis=1) < 0.04
            via_done.append(m & near)
            dropped |= m & ~held

        m = active & (ph == self.TRANSPORT)
        target[m, :2], target[m, 2] = place_xy[m], self.carry[m]
        grip[m] = -1.0
        done_transport = m & self.reached(target, 0.012)
        dropped |= m & ~held

        m = active & (ph == self.LOWER)
        target[m, :2], target[m, 2] = place_xy[m], place_z[m]
        grip[m] = -1.0
        speed[m] = np.minimum(speed[m], 0.6)
        done_lower = m & self.reached(target, 0.008)
        dropped |= m & ~held

        m = active & (ph == self.RELEASE)
        done_release = m & (self.timer >= 5)

        m = active & (ph == self.RETREAT)
        target[m, :2], target[m, 2] = place_xy[m], place_z[m] + 0.12

        for mask in (
            done_approach,
            done_descend,
            done_close,
            done_lift,
            *via_done,
            done_transport,
            done_lower,
            done_release,
        ):
            self.advance(mask)
        self.advance(dropped, to=self.APPROACH)
        return target, yaw, grip, speed
