"""Synthetic rollouts: a VLA policy rolled out inside a one-step world model, scored by the
model's own heads, filtered for consistency, written as `origin=wm` episodes.

    report = generate(load_world_model(wm_run), policy_run, start_store, out_store,
                      episodes=32, max_steps=200, seed=0)

- Start states are the first frames of episodes drawn (seeded) from `start_store`, with
  their instruction; the policy sees decoded frames, the model's proprioception and that
  instruction, plans a chunk (seeded noise), executes `n_act` actions, re-plans.
- Generated episodes are written per control step, so the model must step one action at
  a time (`algo.horizon=1`); a chunk model predicts frames only at chunk boundaries.
- An episode ends where the model's done head says so (probability > 0.5; its success
  head gives the outcome) or at `max_steps` (truncated).
- Filters (`filter=`, `unilab.worldmodel.consistency`): `reencode` (the default) rolls the
  same actions from latents re-encoded from the decoded frames at every step (what the model
  would do if it had to live on its own pictures) and keeps an episode when both paths
  predict the same outcome and, with `max_drift` set, their latents stay within it (mean squared
  difference over the mean squared latent); `ensemble` steps the same actions open loop in
  other world models trained on the same data with other seeds (`ensemble=`) and keeps an
  episode when every member's verdict is the main path's outcome; `both`; `state` checks
  the success head against the task's own rule on the predicted end state (`state_rule=`,
  for models of the critic state); `none`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from unilab.data.episode import EpisodeMeta
from unilab.data.schema import StoreSchema
from unilab.data.store import EpisodeStore
from unilab.export.run_policy import load_run_policy
from unilab.policies.vla.policy import VLAPolicy
from unilab.worldmodel.consistency import (
    REASONS,
    check_filter,
    check_members,
    consistency,
    member_verdict,
    verdict,
)
from unilab.worldmodel.fidelity import LoadedWorldModel, WorldModelRunError

__all__ = ["GenerateReport", "ModelRollouts", "consistency", "generate", "rollout_in_model"]


@dataclass
class GenerateReport:
    generated: int
    kept: int
    predicted_success: float
    """Fraction of the kept episodes the model's success head calls successes."""
    frames: int
    seconds: float
    dropped: dict[str, int] = field(default_factory=dict)
    """Why episodes were filtered out: `outcome` (the two paths disagree), `drift` (the
    re-encoded path drifted), `ensemble` (a member disagrees); the filter's reasons only."""

    @property
    def frames_per_s(self) -> float:
        return self.frames / max(self.seconds, 1e-9)

    def to_dict(self) -> dict[str, Any]:
        return {
            "generated": self.generated,
            "kept": self.kept,
            "predicted_success": self.predicted_success,
            "frames": self.frames,
            "seconds": round(self.seconds, 2),
            "frames_per_s": round(self.frames_per_s, 1),
            "dropped": self.dropped,
        }


def _as_uint8(decoded: torch.Tensor) -> torch.Tensor:
    """(B, 3, S, S) in [0, 1] -> (B, S, S, 3) uint8."""
    return (decoded.clamp(0, 1) * 255.0).round().to(torch.uint8).movedim(1, -1)


def _check_pair(loaded: LoadedWorldModel, policy: VLAPolicy) -> None:
    m = loaded.model
    if m.horizon != 1:
        raise WorldModelRunError(
            f"generation writes one frame per control step: train the world model with "
            f"algo.horizon=1 (this one steps {m.horizon} actions at a time)"
        )
    want = {c: (m.size, m.size) for c in m.cameras}
    if dict(policy.inputs.cameras) != want:
        raise WorldModelRunError(
            f"the policy reads cameras {dict(policy.inputs.cameras)}, the world model makes "
            f"{want}: train both on the same task.cameras and task.image_size"
        )
    if policy.inputs.proprio_dim != m.proprio_dim or policy.action_dim != m.action_dim:
        raise WorldModelRunError(
            f"policy proprio/action widths ({policy.inputs.proprio_dim}, {policy.action_dim}) "
            f"differ from the world model's ({m.proprio_dim}, {m.action_dim})"
        )


@dataclass
class ModelRollouts:
    """Every rollout of the policy inside the model, kept by the filter or not (B episodes
    padded to T steps): what `generate` writes and what `unilab bench wm_filter` replays in
    the simulator."""

    rows: dict[str, np.ndarray]
    """(B, T, ...) per store field (images, proprio, instruction, action) and `reward`."""
    fields: list[str]
    specs: dict[str, Any]
    length: np.ndarray
    """(B,) control steps of each episode (the model's done step, or max_steps)."""
    outcome: np.ndarray
    """(B,) 0 truncated at max_steps, 1 ended in failure, 2 ended in success (the model's
    heads on the main path)."""
    outcome_reencoded: np.ndarray
    """(B,) the same on the re-encoded path (-1 where it was not rolled: filter `ensemble` or
    `none`)."""
    drift: np.ndarray
    """(B,) relative latent drift between the two paths (NaN where not rolled)."""
    keep: np.ndarray
    """(B,) bool: passes the filter."""
    reason: list[str]
    """Per episode '' (kept), 'outcome', 'drift' or 'ensemble'."""
    picks: np.ndarray
    """(B,) index of the start episode in the start store."""
    metas: list[EpisodeMeta]
    seconds: float
    outcome_members: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.int64))
    """(M, B) each ensemble member's verdict (`consistency.member_verdict`); M = 0 without
    an ensemble."""
    success_members: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    """(M, B) each member's P(success) at its verdict step."""
    filter: str = "reencode"
    state_success: np.ndarray | None = None
    """(B,) bool: the task's success rule on the predicted state where each episode ended
    (or at max_steps); None without a rule."""

    @property
    def predicted_success(self) -> np.ndarray:
        return np.asarray(self.outcome == 2)

    @property
    def success_members_mean(self) -> np.ndarray:
        """(B,) the members' mean P(success) at their verdicts (NaN without an ensemble)."""
        if not len(self.success_members):
            return np.full(len(self.outcome), np.nan)
        return np.asarray(self.success_members.mean(0))


@torch.no_grad()
def rollout_in_model(
    loaded: LoadedWorldModel,
    policy_run: Path,
    start_store: Path,
    *,
    episodes: int,
    max_steps: int,
    seed: int = 0,
    max_drift: float | None = None,
    ensemble: Sequence[LoadedWorldModel] = (),
    filter: str = "reencode",
    state_rule: Callable[[np.ndarray], np.ndarray] | None = None,
) -> tuple[ModelRollouts, Any]:
    """Roll the policy of `policy_run` out inside the model from seeded start frames of
    `start_store` (see the module doc); nothing is written. The re-encoded path is rolled
    for the filters `reencode` and `both`; the `ensemble` members step the main path's
    actions whatever the filter (no decoding: a model step each); `state_rule` (the task's
    `success_from_state`) judges the predicted state each episode ended in. -> rollouts,
    the loaded policy run."""
    if episodes < 1 or max_steps < 1:
        raise ValueError(f"episodes and max_steps must be >= 1, got {episodes}, {max_steps}")
    members = list(ensemble)
    check_filter(filter, len(members), state_rule is not None)
    check_members(loaded, members)
    reencode = filter in ("reencode", "both")
    rp = load_run_policy(Path(policy_run))
    policy = rp.actor
    if not isinstance(policy, VLAPolicy):
        raise WorldModelRunError(f"{policy_run} is not a VLA run (algo={rp.config.algo.name})")
    policy.eval()
    _check_pair(loaded, policy)
    m, pf = loaded.model, loaded.proprio_field
    instr_field = str(getattr(rp.config.algo, "instruction_field", "obs/instruction"))
    fields = [f"images/{c}" for c in m.cameras] + ["action"]
    fields += [pf] if m.proprio_dim else []
    fields += [instr_field] if policy.inputs.vocab_size else []
    rng = np.random.default_rng(seed)
    started = time.perf_counter()
    with EpisodeStore.open(start_store, "r") as store:
        missing = [f for f in fields if f not in store.schema.fields]
        if missing:
            raise WorldModelRunError(f"{start_store} lacks field(s) {missing}")
        specs = {f: store.schema.fields[f] for f in fields}
        picks = rng.integers(0, len(store), episodes)
        starts = [store.episode(int(i), fields) for i in picks]
        metas = [store.meta(int(i)) for i in picks]
    b, n_act = episodes, int(policy.cfg.n_act)
    frames0 = {
        c: torch.from_numpy(np.stack([s[f"images/{c}"][0] for s in starts])) for c in m.cameras
    }
    z = zb = m.encode(frames0)
    p = (
        m.proprio_norm(torch.from_numpy(np.stack([s[pf][0] for s in starts])))
        if m.proprio_dim
        else torch.zeros(b, 0)
    )
    pb = p
    zs = [k.model.encode(frames0) for k in members]
    ps = [
        k.model.proprio_norm(torch.from_numpy(np.stack([s[pf][0] for s in starts])))
        if m.proprio_dim
        else torch.zeros(b, 0)
        for k in members
    ]
    heads: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in members]
    instruction = (
        torch.from_numpy(np.stack([s[instr_field][0] for s in starts]))
        if policy.inputs.vocab_size
        else None
    )
    gen = torch.Generator().manual_seed(int(seed))
    pad = torch.zeros(b, 1, dtype=torch.bool)
    rows: dict[str, list[np.ndarray]] = {k: [] for k in [*fields, "reward"]}
    alive = np.ones(b, bool)
    length = np.full(b, max_steps)
    outcome_a = np.zeros(b, np.int64)  # 0 running/truncated, 1 ended in failure, 2 success
    outcome_b = np.zeros(b, np.int64)
    drift_num, drift_den = np.zeros(b), np.zeros(b)
    end_state = np.zeros((b, m.proprio_dim), np.float32)
    chunk = torch.zeros(b, policy.horizon, m.action_dim)
    for t in range(max_steps):
        decoded = m.decode(z)
        images = {c: _as_uint8(decoded[:, i]) for i, c in enumerate(m.cameras)}
        proprio = m.proprio_norm.inverse(p) if m.proprio_dim else None
        if t % n_act == 0:
            obs: dict[str, torch.Tensor] = {f"images/{c}": images[c] for c in m.cameras}
            if proprio is not None:
                obs["policy"] = proprio
            if instruction is not None:
                obs["instruction"] = instruction
            chunk = policy.sample(obs, deterministic=True, noise=policy.draw_noise(b, gen))[0]
        action = chunk[:, t % n_act].to(torch.float32)
        for c in m.cameras:
            rows[f"images/{c}"].append(images[c].numpy())
        if proprio is not None:
            rows[pf].append(proprio.numpy().astype(np.float32))
        if instruction is not None:
            rows[instr_field].append(instruction.numpy())
        rows["action"].append(action.numpy())
        z, p, reward, done, success = m.predict(z, p, action[:, None], pad)
        for k, member in enumerate(members):
            zs[k], ps[k], _, done_k, success_k = member.model.predict(
                zs[k], ps[k], action[:, None], pad
            )
            heads[k].append((torch.sigmoid(done_k).numpy(), torch.sigmoid(success_k).numpy()))
        rows["reward"].append(reward.numpy().astype(np.float32))
        live = alive.copy()
        if state_rule is not None and m.proprio_dim:
            end_state[live] = m.proprio_norm.inverse(p).numpy()[live]
        ended = (torch.sigmoid(done) > 0.5).numpy() & live
        win = (torch.sigmoid(success) > 0.5).numpy()
        outcome_a[ended] = np.where(win[ended], 2, 1)
        if reencode:
            zb_in = m.encode({c: _as_uint8(m.decode(zb)[:, i]) for i, c in enumerate(m.cameras)})
            zb, pb, _, done_b, success_b = m.predict(zb_in, pb, action[:, None], pad)
            drift_num[live] += (z - zb).square().flatten(1).mean(1).numpy()[live]
            drift_den[live] += z.square().flatten(1).mean(1).numpy()[live]
            ended_b = (torch.sigmoid(done_b) > 0.5).numpy()
            win_b = (torch.sigmoid(success_b) > 0.5).numpy()
            first_b = live & (outcome_b == 0) & ended_b
            outcome_b[first_b] = np.where(win_b[first_b], 2, 1)
        length[ended] = t + 1
        alive &= ~ended
        if not alive.any():
            break
    if reencode:
        drift = drift_num / np.maximum(drift_den, 1e-12)
    else:
        outcome_b, drift = np.full(b, -1, np.int64), np.full(b, np.nan)
    stacked = {k: np.stack(v, 1) for k, v in rows.items()}  # (B, T, ...)
    verdicts = [
        member_verdict(
            np.stack([d for d, _ in h], 1), np.stack([w for _, w in h], 1), length, outcome_a > 0
        )
        for h in heads
    ]
    outcome_m = np.array([o for o, _ in verdicts], np.int64).reshape(len(members), b)
    success_m = np.array([w for _, w in verdicts], np.float64).reshape(len(members), b)
    state_success = None if state_rule is None else np.asarray(state_rule(end_state), bool)
    keep, reason = verdict(filter, outcome_a, outcome_b, drift, max_drift, outcome_m, state_success)
    rollouts = ModelRollouts(
        rows=stacked,
        fields=fields,
        specs=specs,
        length=length,
        outcome=outcome_a,
        outcome_reencoded=outcome_b,
        drift=drift,
        keep=keep,
        reason=reason,
        picks=np.asarray(picks),
        metas=metas,
        seconds=time.perf_counter() - started,
        outcome_members=outcome_m,
        success_members=success_m,
        filter=filter,
        state_success=state_success,
    )
    return rollouts, rp


def generate(
    loaded: LoadedWorldModel,
    policy_run: Path,
    start_store: Path,
    out_store: Path,
    *,
    episodes: int,
    max_steps: int,
    seed: int = 0,
    max_drift: float | None = None,
    wm_run: str = "",
    ensemble: Sequence[LoadedWorldModel] = (),
    filter: str = "reencode",
    state_rule: Callable[[np.ndarray], np.ndarray] | None = None,
) -> GenerateReport:
    """Roll out (`rollout_in_model`), filter (`filter`, with the `ensemble` members for
    `ensemble`/`both`, the task's `state_rule` for `state`) and write the kept episodes to
    `out_store` (replaced)."""
    started = time.perf_counter()
    ro, rp = rollout_in_model(
        loaded,
        policy_run,
        start_store,
        episodes=episodes,
        max_steps=max_steps,
        seed=seed,
        max_drift=max_drift,
        ensemble=ensemble,
        filter=filter,
        state_rule=state_rule,
    )
    stacked, fields, length, outcome_a = ro.rows, ro.fields, ro.length, ro.outcome
    drift, picks, metas = ro.drift, ro.picks, ro.metas
    dropped = dict.fromkeys(REASONS[filter], 0)
    members = [str(k.checkpoint) for k in ensemble]
    kept = 0
    successes = 0
    frames_written = 0
    schema = StoreSchema({k: v for k, v in ro.specs.items()})
    fps = 1.0 / float(rp.metadata.control_dt) if rp.metadata.control_dt else None
    with EpisodeStore.create(out_store, schema, overwrite=True) as out:
        batch = []
        for e in range(len(length)):
            if ro.reason[e]:
                dropped[ro.reason[e]] += 1
                continue
            n = int(length[e])
            ep: dict[str, Any] = {k: stacked[k][e, :n] for k in fields}
            ep["reward"] = stacked["reward"][e, :n]
            ep["terminated"] = np.zeros(n, bool)
            ep["truncated"] = np.zeros(n, bool)
            ep["terminated" if outcome_a[e] else "truncated"][-1] = True
            ep["origin"] = "wm"
            succeeded = bool(outcome_a[e] == 2)
            meta = EpisodeMeta(
                task=metas[e].task,
                language_instruction=metas[e].language_instruction,
                success=succeeded,
                seed=int(seed),
                robot=metas[e].robot,
                fps=fps,
                tags={
                    "world_model": {
                        "run": wm_run,
                        "checkpoint": loaded.checkpoint.name,
                        "step": loaded.step,
                    },
                    "policy_run": str(policy_run),
                    "start_episode": int(picks[e]),
                },
            )
            if np.isfinite(drift[e]):
                meta.tags["consistency_drift"] = float(drift[e])
            if ro.state_success is not None:
                meta.tags["state_success"] = bool(ro.state_success[e])
            if members:
                meta.tags["ensemble"] = {
                    "checkpoints": members,
                    "outcomes": ro.outcome_members[:, e].tolist(),
                    "success_mean": float(ro.success_members_mean[e]),
                }
            batch.append((ep, meta))
            kept += 1
            successes += int(succeeded)
            frames_written += n
        out.append_episodes(batch)
    return GenerateReport(
        generated=len(length),
        kept=kept,
        predicted_success=successes / max(kept, 1),
        frames=frames_written,
        seconds=time.perf_counter() - started,
        dropped=dropped,
    )
