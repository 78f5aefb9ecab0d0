"""A scripted operator for tests and demos: takes over and hands back on a seeded schedule,
moves the robot smoothly while in control, and presses episode keys where told.

`spans(episode)` is the schedule: 1-2 takeovers per episode at episode frames drawn from
`seed` and the episode index alone, so a test can compute the labels a recording must
have (`expected_labels`) without looking at the recording. `pressed` logs every key the
operator actually pressed, at which episode frame; `performed_labels` turns its takeover
presses into labels (they equal the schedule unless the station skipped a tick).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from unilab.teleop.devices import TAKEOVER, ActionSpace, DeviceInput


class VirtualOperator:
    name = "virtual"

    def __init__(
        self,
        seed: int = 0,
        *,
        horizon: int = 100,
        first_frame: int = 5,
        span_frames: tuple[int, int] = (8, 30),
        max_spans: int = 2,
        script: Mapping[tuple[int, int], str] | None = None,
    ) -> None:
        self.seed = seed
        self.horizon = horizon
        self.first_frame = first_frame
        self.span_frames = span_frames
        self.max_spans = max_spans
        self.script = dict(script or {})
        """(episode, frame) -> an event to press then (save, discard, rerecord, quit...)."""
        self.episode = 0
        self.human = False
        self._space: ActionSpace | None = None
        self._target: np.ndarray = np.zeros(0, np.float32)
        self._goal: np.ndarray = np.zeros(0, np.float32)
        self._rng = np.random.default_rng(seed)
        self._toggles: list[int] = []
        self._next_toggle = 0
        self._fired: set[tuple[int, int]] = set()
        self.pressed: list[tuple[int, int, str]] = []

    def spans(self, episode: int) -> list[tuple[int, int]]:
        """[start, end) episode frames of each takeover in session episode `episode`."""
        rng = np.random.default_rng([self.seed, episode])
        out: list[tuple[int, int]] = []
        start = self.first_frame + int(rng.integers(0, 10))
        for _ in range(int(rng.integers(1, self.max_spans + 1))):
            length = int(rng.integers(self.span_frames[0], self.span_frames[1] + 1))
            if start + length > self.horizon:
                break
            out.append((start, start + length))
            start += length + int(rng.integers(5, 25))
        return out

    def expected_labels(self, episode: int, length: int) -> np.ndarray:
        """Labels the schedule asks for (what a recording must hold when the station
        answered every tick at the scheduled frames)."""
        labels = np.zeros(length, dtype=bool)
        for a, b in self.spans(episode):
            labels[a : min(b, length)] = True
        return labels

    def performed_labels(self, episode: int, length: int) -> np.ndarray:
        """Labels from the takeover key presses this operator actually made in `episode`
        (a toggle lands on the first frame the station asked about at or after its
        scheduled frame: a station that skipped a tick under load delays it)."""
        toggles = [f for ep, f, ev in self.pressed if ep == episode and ev == TAKEOVER]
        labels = np.zeros(length, dtype=bool)
        for i in range(0, len(toggles), 2):
            end = toggles[i + 1] if i + 1 < len(toggles) else length
            labels[toggles[i] : min(end, length)] = True
        return labels

    # ------------------------------------------------------------------ device
    def connect(self, space: ActionSpace) -> None:
        self._space = space
        self._target = np.clip(np.zeros(space.dim, np.float32), space.low, space.high)
        self._goal = self._target.copy()

    def begin_episode(self, episode: int) -> None:
        self.episode = episode
        self.human = False
        self._toggles = [f for span in self.spans(episode) for f in span]
        self._next_toggle = 0
        self._fired = set()

    def start(self, current: np.ndarray) -> None:
        assert self._space is not None
        self._target = np.asarray(current, np.float32).copy()
        self._goal = self._new_goal()

    def _new_goal(self) -> np.ndarray:
        assert self._space is not None
        s = self._space
        # Goals in the middle half of the range: a human keeps away from the joint limits.
        mid, half = (s.low + s.high) / 2, (s.high - s.low) / 4
        return (mid + self._rng.uniform(-1, 1, s.dim) * half).astype(np.float32)

    def poll(self, frame: int, obs: dict[str, np.ndarray], dt: float) -> DeviceInput:
        assert self._space is not None, "connect() first"
        events: list[str] = []
        if self._next_toggle < len(self._toggles) and frame >= self._toggles[self._next_toggle]:
            events.append(TAKEOVER)
            self.human = not self.human
            self._next_toggle += 1
        for (ep, at), event in self.script.items():
            if ep == self.episode and frame >= at and (ep, at) not in self._fired:
                self._fired.add((ep, at))
                events.append(event)
        for ev in events:
            self.pressed.append((self.episode, frame, ev))
        step = self._space.max_step * 0.3
        gap = self._goal - self._target
        if np.all(np.abs(gap) < step):
            self._goal = self._new_goal()
        self._target = np.clip(
            self._target + np.clip(gap, -step, step), self._space.low, self._space.high
        )
        return DeviceInput(self._target.astype(np.float32), events)

    def close(self) -> None:
        self._space = None
