"""Record one env of a rollout and write it to Rerun as columns (one call per entity).

Per step the recorder copies the env's body poses, joint positions, action, reward terms,
task state attributes (commands, targets) and, where given, camera images: JPEG bytes (a
rendered view) or uint8 (H, W, 3) arrays (a policy's own observation images, kept exact).
`write` logs the static scene (`rerun_scene.log_scene`) and then sends every series with
`send_columns`, so recording costs a few array copies per step and no Rerun call at all.

Entities: `world/...` (the scene), `joints/<joint>`, `actions/<joint>`, `reward/total`,
`reward/<term>`, `state/<attr>/<i>`, `cameras/<camera>`, `episode/index`. Timelines:
`step` (sequence) and `sim_time` (seconds).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import mujoco
import numpy as np
import rerun as rr

from unilab.viz.rerun_scene import SceneLayout, entity_name, log_scene

APPLICATION_ID = "unilab"


@dataclass
class _Series:
    steps: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    xpos: list[np.ndarray] = field(default_factory=list)
    xquat: list[np.ndarray] = field(default_factory=list)
    qpos: list[np.ndarray] = field(default_factory=list)
    actions: list[np.ndarray] = field(default_factory=list)
    rewards: list[np.ndarray] = field(default_factory=list)
    state: dict[str, list[np.ndarray]] = field(default_factory=dict)
    episode: list[int] = field(default_factory=list)
    images: dict[str, list[tuple[int, float, bytes | np.ndarray]]] = field(default_factory=dict)


def scalar_joints(model: mujoco.MjModel) -> tuple[list[str], np.ndarray]:
    """Names and qpos addresses of every hinge and slide joint (one value each)."""
    names, addrs = [], []
    for j in range(model.njnt):
        if int(model.jnt_type[j]) in (mujoco.mjtJoint.mjJNT_HINGE, mujoco.mjtJoint.mjJNT_SLIDE):
            name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j) or ""
            names.append(entity_name(name, f"joint_{j}"))
            addrs.append(int(model.jnt_qposadr[j]))
    return names, np.asarray(addrs, dtype=np.int64)


class RolloutRecorder:
    def __init__(
        self,
        model: mujoco.MjModel,
        action_names: Sequence[str],
        reward_terms: Sequence[str],
        state_attrs: Sequence[str] = (),
    ) -> None:
        self.model = model
        self.action_names = [entity_name(n, f"a{i}") for i, n in enumerate(action_names)]
        self.reward_terms = sorted(reward_terms)
        self.state_attrs = list(state_attrs)
        self.joint_names, self._qpos_adr = scalar_joints(model)
        self._s = _Series()

    @property
    def num_steps(self) -> int:
        return len(self._s.steps)

    def add(
        self,
        step: int,
        sim_time: float,
        xpos: np.ndarray,
        xquat: np.ndarray,
        qpos: np.ndarray,
        action: np.ndarray | None,
        reward_terms: dict[str, float] | None,
        state: dict[str, np.ndarray] | None = None,
        episode: int = 0,
        images: Mapping[str, bytes | np.ndarray] | None = None,
    ) -> None:
        """One step of the recorded env: body poses (nbody, 3) / (nbody, 4) wxyz, full qpos,
        its action and weighted reward terms (None on the first, pre-action frame)."""
        s = self._s
        s.steps.append(step)
        s.times.append(sim_time)
        s.xpos.append(np.array(xpos, dtype=np.float32))
        s.xquat.append(np.array(xquat, dtype=np.float32))
        s.qpos.append(np.asarray(qpos, dtype=np.float64)[self._qpos_adr].copy())
        nan_a = np.full(len(self.action_names), np.nan)
        s.actions.append(nan_a if action is None else np.asarray(action, np.float64).copy())
        terms = reward_terms or {}
        s.rewards.append(np.array([terms.get(t, np.nan) for t in self.reward_terms]))
        for name in self.state_attrs:
            value = np.ravel((state or {}).get(name, np.nan)).astype(np.float64)
            s.state.setdefault(name, []).append(value)
        s.episode.append(episode)
        for cam, image in (images or {}).items():
            kept = image if isinstance(image, bytes) else np.array(image, dtype=np.uint8)
            s.images.setdefault(cam, []).append((step, sim_time, kept))

    def write(self, rec: rr.RecordingStream, prefix: str = "") -> SceneLayout:
        """Log the scene and every recorded series into `rec`, each entity path prefixed
        with `prefix` (e.g. "env_3/" to put several envs in one recording)."""
        layout = log_scene(rec, self.model, root=f"{prefix}world")
        s = self._s
        if not s.steps:
            return layout
        index = [
            rr.TimeColumn("step", sequence=np.asarray(s.steps, dtype=np.int64)),
            rr.TimeColumn("sim_time", duration=np.asarray(s.times, dtype=np.float64)),
        ]
        xpos, xquat = np.stack(s.xpos), np.stack(s.xquat)
        for bid, path in zip(layout.body_ids, layout.body_paths, strict=True):
            rec.send_columns(
                path,
                indexes=index,
                columns=rr.Transform3D.columns(
                    translation=xpos[:, bid], quaternion=xquat[:, bid][:, [1, 2, 3, 0]]
                ),
            )

        def series(path: str, values: np.ndarray) -> None:
            rec.send_columns(
                prefix + path, indexes=index, columns=rr.Scalars.columns(scalars=values)
            )

        qpos = np.stack(s.qpos)
        for i, name in enumerate(self.joint_names):
            series(f"joints/{name}", qpos[:, i])
        actions = np.stack(s.actions)
        for i, name in enumerate(self.action_names):
            series(f"actions/{name}", actions[:, i])
        rewards = np.stack(s.rewards)
        if self.reward_terms:
            series("reward/total", rewards.sum(axis=1))
        for i, term in enumerate(self.reward_terms):
            series(f"reward/{entity_name(term, f'term_{i}')}", rewards[:, i])
        for name, rows in s.state.items():
            values = np.stack(rows)
            for i in range(values.shape[1]):
                series(f"state/{entity_name(name, 'attr')}/{i}", values[:, i])
        series("episode/index", np.asarray(s.episode, dtype=np.float64))
        for cam, frames in s.images.items():
            for step, t, image in frames:
                rec.set_time("step", sequence=step)
                rec.set_time("sim_time", duration=t)
                rec.log(
                    f"{prefix}cameras/{entity_name(cam, 'camera')}",
                    rr.EncodedImage(contents=image, media_type="image/jpeg")
                    if isinstance(image, bytes)
                    else rr.Image(image, color_model="RGB"),
                )
        return layout

    def save(self, path: Path, recording_name: str = "") -> Path:
        """Write an `.rrd` file."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        rec = rr.RecordingStream(APPLICATION_ID)
        rec.save(str(path))
        if recording_name:
            rec.send_recording_name(recording_name)
        self.write(rec)
        rec.flush()
        rec.disconnect()
        return path

    def spawn(self, recording_name: str = "") -> None:
        """Stream to a newly started Rerun viewer (needs a display and the viewer binary)."""
        rec = rr.RecordingStream(APPLICATION_ID)
        rec.spawn()
        if recording_name:
            rec.send_recording_name(recording_name)
        self.write(rec)
        rec.flush()
