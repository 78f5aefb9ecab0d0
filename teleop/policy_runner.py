"""The policy side of the operator station, torch-free.

`HilPolicy` turns a policy function into one action per control tick. The function takes
the observation groups and returns an action (A,), an action chunk (H, A) that is then
executed open-loop for H ticks (a flow-matching VLA; `reset()` drops the rest of a chunk,
e.g. after a takeover), or a dict with "actions" and optionally "predicted_success".

`load_hil_policy(path)` loads an exported `policy.onnx` (or a run directory's
`export/policy.onnx`) with onnxruntime alone: an MLP policy (one action per tick from its
observation group) or a VLA (`unilab.export.vla_onnx`): it reads the robot's vector group
`policy`, the newest frame of each camera it was trained on and the instruction as text,
which it turns into ids with the vocabulary exported beside the graph; its chunks run
through the same `ChunkExecutor` as play, eval and deploy (n_act actions per chunk,
ensembling as exported, noise from `seed`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from unilab.export.metadata import PolicyMetadata
from unilab.export.vla_metadata import VLAMetadata

if TYPE_CHECKING:
    from unilab.tasks.instructions import Vocabulary

PolicyFn = Callable[[dict[str, np.ndarray]], Any]
"""Observation groups -> an action, a chunk, or {"actions", "predicted_success"}. A policy
that reads the instruction takes it as a second argument (text)."""


class PolicyMismatchError(ValueError):
    """The policy does not fit the robot (observation or action sizes differ)."""


@dataclass
class PolicyStep:
    action: np.ndarray
    predicted_success: float | None = None


class HilPolicy:
    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        metadata: PolicyMetadata | None = None,
        name: str = "",
        vla: VLAMetadata | None = None,
        on_reset: Callable[[], None] | None = None,
    ) -> None:
        self.fn = fn
        self.metadata = metadata
        self.name = name
        self.vla = vla
        """The exported VLA's record (None for an MLP policy)."""
        self.on_reset = on_reset
        self._queue: deque[np.ndarray] = deque()
        self._success: float | None = None

    @property
    def cameras(self) -> tuple[str, ...]:
        """Cameras whose frames the policy reads (`images/<cam>` in its observation)."""
        return tuple(self.vla.cameras) if self.vla is not None else ()

    @property
    def reads_instruction(self) -> bool:
        return self.vla is not None and self.vla.vocab_size > 0

    def missing(self, obs: dict[str, np.ndarray]) -> list[str]:
        """Observation keys the policy needs that `obs` lacks yet (no camera frame so far)."""
        return [f"images/{c}" for c in self.cameras if f"images/{c}" not in obs]

    def reset(self) -> None:
        self._queue.clear()
        if self.on_reset is not None:
            self.on_reset()

    def __call__(self, obs: dict[str, np.ndarray], instruction: str | None = None) -> PolicyStep:
        if not self._queue:
            out = self.fn(obs, instruction) if self.reads_instruction else self.fn(obs)
            success = None
            if isinstance(out, dict):
                success = out.get("predicted_success")
                out = out["actions"]
            actions = np.asarray(out, dtype=np.float32)
            if actions.ndim == 1:
                actions = actions[None]
            self._queue.extend(actions)
            self._success = None if success is None else float(np.asarray(success).reshape(-1)[0])
        return PolicyStep(self._queue.popleft(), self._success)

    def check_robot(self, robot: dict[str, Any]) -> None:
        """Raise `PolicyMismatchError` unless the policy's sizes match the robot host's."""
        if self.vla is not None:
            self._check_vla(robot)
            return
        meta = self.metadata
        if meta is None:
            return
        self._check_widths("policy", robot, meta.action_dim, meta.obs_group, meta.obs_dim)

    def _check_widths(
        self, kind: str, robot: dict[str, Any], action_dim: int, group: str, obs_dim: int
    ) -> None:
        """The action width, and the width of observation `group` (0: not read)."""
        n = len(robot["action_names"])
        if action_dim != n:
            raise PolicyMismatchError(
                f"{kind} {self.name} outputs {action_dim} actions; the robot takes {n} "
                f"({robot['action_names']})"
            )
        dims = robot["obs_dims"]
        if obs_dim and dims.get(group) != obs_dim:
            raise PolicyMismatchError(
                f"{kind} {self.name} reads {group!r} of width {obs_dim}; the robot sends {dims}"
            )

    def _check_vla(self, robot: dict[str, Any]) -> None:
        vla = self.vla
        assert vla is not None
        self._check_widths("VLA", robot, vla.action_dim, "policy", vla.proprio_dim)
        streamed = {c: list(s) for c, s in robot.get("cameras", {}).items()}
        for cam, (h, w) in vla.cameras.items():
            if cam not in streamed:
                raise PolicyMismatchError(
                    f"VLA {self.name} reads camera {cam!r} ({h}x{w}); the robot host streams "
                    f"{sorted(streamed) or 'no cameras'}: start it with --camera {cam}"
                )
            if streamed[cam] != [h, w, 3]:
                raise PolicyMismatchError(
                    f"VLA {self.name} reads camera {cam!r} as {h}x{w}x3; the robot host "
                    f"streams it as {'x'.join(map(str, streamed[cam]))}"
                )

    def check_instruction(self, text: str | None) -> None:
        """Raise `PolicyMismatchError` when the policy needs an instruction and `text` is
        missing or has words its vocabulary lacks."""
        if not self.reads_instruction:
            return
        assert self.vla is not None
        if not text:
            raise PolicyMismatchError(
                f"VLA {self.name} follows a language instruction and the robot host sends "
                'none: give one with --instruction "pick the red cube"'
            )
        vocab = _vocabulary(self.vla, self.name)
        unknown = vocab.missing([text])
        if unknown:
            raise PolicyMismatchError(
                f"instruction {text!r}: words {unknown} are not in VLA {self.name}'s "
                f"vocabulary of {len(vocab)} words"
            )


def _vocabulary(vla: VLAMetadata, name: str) -> Vocabulary:
    from unilab.tasks.instructions import Vocabulary  # the task package is heavy to import

    try:
        return Vocabulary(vla.vocabulary)
    except ValueError as exc:
        raise PolicyMismatchError(
            f"VLA {name} was exported without a usable vocabulary ({exc}); the station "
            "cannot turn an instruction into ids: export the run again with `unilab export`"
        ) from None


def resolve_onnx(path: str | Path) -> Path:
    p = Path(path)
    for candidate in (p, p / "export" / "policy.onnx", p / "policy.onnx"):
        if candidate.is_file() and candidate.suffix == ".onnx":
            return candidate
    raise PolicyMismatchError(
        f"no policy.onnx at {p} (looked for the file, <run>/export/policy.onnx and "
        "<dir>/policy.onnx); export a run with `unilab export <run dir>`"
    )


def load_hil_policy(path: str | Path, *, seed: int = 0) -> HilPolicy:
    """An exported MLP policy or VLA as a `HilPolicy`; `seed` seeds a flow VLA's noise."""
    from unilab.deploy.onnx_policy import OnnxPolicy
    from unilab.deploy.onnx_session import is_vla, open_session

    onnx_path = resolve_onnx(path)
    session = open_session(onnx_path, 1)
    if is_vla(session):
        return _load_vla(onnx_path, session, seed)
    policy = OnnxPolicy(onnx_path)
    group = policy.metadata.obs_group

    def fn(obs: dict[str, np.ndarray]) -> np.ndarray:
        return policy(obs[group])

    return HilPolicy(fn, metadata=policy.metadata, name=str(onnx_path))


def _load_vla(path: Path, session: Any, seed: int) -> HilPolicy:
    from unilab.deploy.vla_onnx_policy import OnnxVLAPolicy

    vla = OnnxVLAPolicy(path, session=session)
    meta = vla.metadata
    vocab = _vocabulary(meta, str(path)) if meta.vocab_size else None
    executor = vla.executor(num_envs=1, seed=seed)
    keys = [f"images/{c}" for c in meta.cameras] + (["policy"] if meta.proprio_dim else [])
    encoded: dict[str, np.ndarray] = {}

    def act(obs: dict[str, np.ndarray], instruction: str | None = None) -> np.ndarray:
        batch = {k: np.asarray(obs[k])[None] for k in keys}
        if vocab is not None:
            if instruction not in encoded:
                hil.check_instruction(instruction)
                assert instruction is not None
                encoded.clear()  # one instruction per episode: keep only the current one
                encoded[instruction] = vocab.encode(instruction, meta.instruction_len)[None]
            batch["instruction"] = encoded[instruction]
        return executor(batch)[0]

    hil = HilPolicy(act, metadata=vla.robot, name=str(path), vla=meta, on_reset=executor.reset)
    return hil
