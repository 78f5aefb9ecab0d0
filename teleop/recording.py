"""Turning a robot host's status stream into episodes in the episode store.

A recorded frame k pairs the observation of status k with the decision taken on it: the
command the station sent answering tick k (after shaping to the host's limits), labelled
`is_intervention` when a human gave it, with the operator's id. That is the
(observation, action) pair a learner needs from an intervention. Status k+1 tells whether
the host applied exactly that command at the next tick; when it did not (the command was
late or rejected, so the host held the previous target) the frame's `held` column is
True. An unanswered tick records what the host applied instead. A frame is only written once the next
one is known, so an episode can be closed on its true last frame by a key press, a safe
stop or a lost status. Episodes go through `EpisodeWriter` into a store opened with
`fsync_data=True`: a committed episode survives a power cut.

Per-frame columns beyond the core ones: `operator` (int16: 0 = no human, k = the k-th name
in the episode's `tags["operators"]`) and `held` (bool, see above). Episode tags: operators, interventions ([start, end)
frame spans), session_episode (the operator station's episode counter, counting discarded
ones), end (how it ended), robot. `language_instruction` is the episode's instruction: the
operator's (`instruction`) or else the one the host sent with its first frame (a simulated
task's), so a language policy can learn from the episode.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from unilab.data.background_append import BackgroundAppender
from unilab.data.episode import EpisodeMeta
from unilab.data.schema import FieldSpec, StoreSchema
from unilab.data.store import EpisodeStore
from unilab.data.writer import EpisodeWriter
from unilab.teleop.link import IMAGE_PREFIX
from unilab.teleop.protocol import Message


def hil_schema(
    obs_dims: dict[str, int], action_dim: int, cameras: dict[str, list[int]]
) -> StoreSchema:
    return StoreSchema.build(
        obs=dict(obs_dims),
        action=action_dim,
        images={c: tuple(s) for c, s in cameras.items()},  # type: ignore[misc]
        extra={"operator": FieldSpec((), "int16"), "held": FieldSpec((), "bool")},
    )


def spans_of(labels: np.ndarray) -> list[list[int]]:
    """[start, end) runs of True in a bool vector."""
    padded = np.concatenate([[False], np.asarray(labels, bool), [False]])
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    return [[int(a), int(b)] for a, b in zip(edges[::2], edges[1::2], strict=True)]


@dataclass
class _Pending:
    tick: int
    episode: int
    episode_step: int
    """The host's step index in its episode of this state (0: the episode's first state)."""
    obs: dict[str, np.ndarray]
    images: dict[str, np.ndarray]
    host_time: float
    instruction: str


@dataclass
class _Sent:
    seq: int
    action: np.ndarray
    source: str
    operator: str


@dataclass
class RecordingStats:
    episodes_saved: int = 0
    episodes_discarded: int = 0
    frames_saved: int = 0
    gaps: int = 0
    late_starts: int = 0
    """Episodes whose recording began after the episode's first state (the station joined,
    or a gap cut it, mid-episode); their `first_step` tag says where."""
    held_frames: int = 0
    """Frames whose command the host did not apply at the next tick (late or rejected)."""
    saved_ids: list[int] = field(default_factory=list)
    session_episodes: list[int] = field(default_factory=list)
    """The station's episode counter of each saved episode, in save order."""


class InterventionRecorder:
    def __init__(
        self,
        store_path: str | os.PathLike[str],
        *,
        robot: dict[str, Any],
        origin: str,
        task: str = "",
        fps: float | None = None,
    ) -> None:
        self.robot = robot
        schema = hil_schema(robot["obs_dims"], len(robot["action_names"]), robot.get("cameras", {}))
        self.store = EpisodeStore.open(store_path, "a", schema=schema, fsync_data=True)
        # Commits (tens of ms, plus fsync) run on a background thread: the station's
        # control loop must answer every tick within the watchdog's 3 periods.
        self.appender = BackgroundAppender(self.store, max_pending=8)
        self.writer = EpisodeWriter(
            cast(EpisodeStore, self.appender), 1, origin=origin, commit_frames=0
        )
        self.task = task
        self.fps = fps or 1.0 / float(robot["control_dt"])
        self.cameras = list(robot.get("cameras", {}))
        self._latest_images: dict[str, np.ndarray] = {
            c: np.zeros(tuple(s), np.uint8) for c, s in robot.get("cameras", {}).items()
        }
        self._pending: _Pending | None = None
        self._held: dict[str, Any] | None = None  # a complete frame waiting for its successor
        self._frame_index = 0
        self._first_step = 0
        self._labels: list[bool] = []
        self._operators: list[str] = []
        self.session_episode = 0
        self.stats = RecordingStats()
        self._sent: dict[int, _Sent] = {}
        self._first_episode = 0
        self.instruction: str | None = None
        """The operator's instruction; it overrides the host's."""
        self._episode_instruction = ""

    def note_command(
        self, answers: int, seq: int, action: np.ndarray, source: str, operator: str
    ) -> None:
        """The command the station sent answering status tick `answers`."""
        self._sent[int(answers)] = _Sent(int(seq), np.array(action, np.float32), source, operator)

    def skip_until_episode(self, episode: int) -> None:
        """Ignore statuses of host episodes before `episode` (those still in flight when
        the station asked for a reset)."""
        self._pending = None
        self._first_episode = int(episode)

    @property
    def frame_index(self) -> int:
        """Index in the current episode of the frame being decided now."""
        return self._frame_index

    # ------------------------------------------------------------------ frames
    def on_status(self, msg: Message) -> str | None:
        """Feed one status (in tick order). Returns "ended" when the episode ended on the
        robot (a simulated task's termination or time limit), "cut" when a gap or safe
        stop closed it, else None."""
        body = msg.body
        for key, img in msg.arrays.items():
            if key.startswith(IMAGE_PREFIX):
                self._latest_images[key[len(IMAGE_PREFIX) :]] = np.array(img)
        result = None
        tick, episode = int(body["tick"]), int(body["episode"])
        if episode < self._first_episode:
            return None  # published before the reset this recording waits for
        pending = self._pending
        self._pending = None
        running = body["mode"] == "running"
        if pending is not None:
            if tick != pending.tick + 1 or episode != pending.episode or not running:
                self.stats.gaps += int(tick != pending.tick + 1)
                result = "cut" if self._held is not None else None
                self._close_held(end="safe_stop" if not running else "gap")
            else:
                applied = body["applied"]
                decided = self._sent.pop(pending.tick, None)
                on_time = decided is not None and applied["seq"] == decided.seq
                if decided is None:  # not answered (the station was behind): what ran
                    decided = _Sent(
                        int(applied["seq"]),
                        np.array(msg.arrays["action"]),
                        str(applied["source"]),
                        str(applied["operator"]),
                    )
                human = decided.source == "human"
                self.stats.held_frames += int(not on_time)
                frame = {
                    **{f"obs/{g}": v for g, v in pending.obs.items()},
                    **{f"images/{c}": img for c, img in pending.images.items()},
                    "action": decided.action,
                    "reward": float(body["reward"]),
                    "is_intervention": human,
                    "operator": self._operator_code(decided.operator) if human else 0,
                    "held": not on_time,
                    "timestamp": self._frame_index / self.fps,
                }
                self._write_held()
                if self._frame_index == 0:
                    self._episode_instruction = self.instruction or pending.instruction
                    self._first_step = pending.episode_step
                    self.stats.late_starts += int(pending.episode_step > 0)
                self._held = frame
                self._labels.append(human)
                self._frame_index += 1
                if body["terminated"] or body["truncated"]:
                    self._close_held(
                        end="terminated" if body["terminated"] else "time_limit",
                        terminate=bool(body["terminated"]),
                    )
                    result = "ended"
        for stale in [t for t in self._sent if t <= tick - 2]:
            del self._sent[stale]
        if running:
            ended = bool(body["terminated"] or body["truncated"])
            next_episode = episode + int(ended)
            obs = {k[4:]: np.array(v) for k, v in msg.arrays.items() if k.startswith("obs/")}
            self._pending = _Pending(
                tick,
                next_episode,
                0 if ended else int(body.get("episode_step", 0)),
                obs,
                {c: self._latest_images[c] for c in self.cameras},
                float(body["host_time"]),
                str(body.get("instruction") or ""),
            )
        return result

    def _operator_code(self, name: str) -> int:
        if name not in self._operators:
            self._operators.append(name)
        return self._operators.index(name) + 1

    def _write_held(self, *, terminated: bool = False, truncated: bool = False) -> None:
        """Write the held frame (the writer commits the episode when a flag is set)."""
        if self._held is None:
            return
        frame = {**self._held, "terminated": terminated, "truncated": truncated}
        self._held = None
        ids = self.writer.add_step({k: np.asarray(v)[None] for k, v in frame.items()})
        self.stats.saved_ids.extend(ids)

    def _meta(self, end: str, success: bool | None = None) -> EpisodeMeta:
        return EpisodeMeta(
            task=self.task,
            robot=str(self.robot.get("driver", "")),
            language_instruction=self._episode_instruction,
            fps=self.fps,
            success=success,
            tags={
                "operators": list(self._operators),
                "interventions": spans_of(np.asarray(self._labels, bool)),
                "session_episode": self.session_episode,
                "end": end,
                "first_step": self._first_step,
                "robot_host": str(self.robot.get("name", "")),
            },
        )

    def _close_held(
        self,
        *,
        end: str,
        terminate: bool = False,
        success: bool | None = None,
    ) -> None:
        """End the episode at the held frame, commit it, and start the next one."""
        if self._held is not None:
            self.writer.set_meta(0, self._meta(end, success))
            self._write_held(terminated=terminate, truncated=not terminate)
            self.stats.episodes_saved += 1
            self.stats.frames_saved += self._frame_index
            self.stats.session_episodes.append(self.session_episode)
        self._start_episode()

    def _start_episode(self) -> None:
        self.writer.discard([0])
        self._held = None
        self._frame_index = 0
        self._labels = []
        self._operators = []
        self.session_episode += 1

    # ------------------------------------------------------------------ keys
    def save(self, *, success: bool | None = None) -> None:
        """End the current episode here and keep it (`success` goes into its metadata; a
        success also marks its last frame terminated)."""
        self._pending = None
        if self._held is None:
            self._start_episode()
            return
        self._close_held(end="saved", terminate=bool(success), success=success)

    def discard(self) -> None:
        """Drop the current episode's frames (also for re-recording it)."""
        self._pending = None
        self.stats.episodes_discarded += 1
        self._start_episode()

    def close(self) -> None:
        """Drop an unfinished episode (it was never saved), wait for queued commits, and
        release the store."""
        try:
            self.writer.discard([0])
            self.writer.close()
            self.appender.close()
        finally:
            self.store.close()
