"""The generator's filters, as pure functions of the rollouts' outcomes (`generate.py` rolls
the paths out; `unilab bench wm_filter` scores these verdicts against the simulator).

- `reencode`: the same actions rolled a second time from latents re-encoded from the decoded
  frames at every step; keep where both paths predict the same outcome and their latents
  stay within `max_drift` (`consistency`; None, the default, checks the outcome only: a
  drift bound removed every rollout in all four `unilab bench wm_filter` runs).
- `ensemble`: the same actions stepped open loop by other world models trained on the same
  data with other seeds (each from the start frames through its own encoder); keep where
  every member's verdict (`member_verdict`) is the main path's outcome.
- `both`: either check removes; `none`: keep everything.
- `state`: the task's own success rule (`Task.success_from_state`) applied to the model's
  predicted state where the episode ended; keep where it agrees with the success head. It
  needs a model whose proprioception is the task's critic state (`task.state_policy=true`),
  so the objects' positions are predicted with the arm's.

Outcomes: 0 truncated at max_steps, 1 ended in failure, 2 ended in success.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from unilab.worldmodel.fidelity import LoadedWorldModel, WorldModelRunError

FILTERS = ("reencode", "ensemble", "both", "state", "none")
"""Filter modes of `generate` / `rollout_in_model` (`--filter`)."""

REASONS = {
    "reencode": ("outcome", "drift"),
    "ensemble": ("ensemble",),
    "both": ("outcome", "drift", "ensemble"),
    "state": ("state",),
    "none": (),
}
"""Why an episode can be dropped under each filter mode (`GenerateReport.dropped` keys)."""


def consistency(
    outcome: np.ndarray, outcome_b: np.ndarray, drift: np.ndarray, max_drift: float | None
) -> tuple[np.ndarray, list[str]]:
    """The re-encode filter: keep where both paths predict the same outcome and the drift is
    within `max_drift`. -> keep mask, reason per episode ('' kept, 'outcome', 'drift')."""
    reason = [
        "outcome" if a != b else ("drift" if max_drift is not None and d > max_drift else "")
        for a, b, d in zip(outcome.tolist(), outcome_b.tolist(), drift.tolist(), strict=True)
    ]
    return np.array([r == "" for r in reason], bool), reason


def member_verdict(
    done_p: np.ndarray, success_p: np.ndarray, length: np.ndarray, main_ended: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """One ensemble member's outcome per episode from its head probabilities along the main
    path's actions: `done_p`, `success_p` (B, T) after each step; `length` (B,) the main
    path's steps; `main_ended` (B,) whether the main path ended (done head) or was truncated.

    The outcome is the success head's (2 if P > 0.5, else 1) at the member's first step with
    P(done) > 0.5 within the main path's length. Where it never fires by then: if the main
    path ended, its success head at the main path's last step decides (2 or 1); if the main
    path was truncated, 0. -> (B,) outcome, (B,) the member's P(success) at that step (the
    main path's last step where it never fired)."""
    b, t = done_p.shape
    length = np.asarray(length, np.int64)
    if success_p.shape != (b, t) or length.shape != (b,) or np.asarray(main_ended).shape != (b,):
        raise ValueError(
            f"member_verdict: done_p {done_p.shape}, success_p {success_p.shape}, length "
            f"{length.shape} and main_ended {np.asarray(main_ended).shape} must be (B, T) "
            "and (B,)"
        )
    if length.min(initial=1) < 1 or length.max(initial=0) > t:
        raise ValueError(f"member_verdict: lengths must be in [1, {t}], got {length.tolist()}")
    fires = (done_p > 0.5) & (np.arange(t)[None, :] < length[:, None])
    fired = fires.any(1)
    step = np.where(fired, fires.argmax(1), length - 1)
    p_end = success_p[np.arange(b), step]
    outcome = np.where(p_end > 0.5, 2, 1).astype(np.int64)
    outcome[~fired & ~np.asarray(main_ended, bool)] = 0
    return outcome, p_end


def ensemble_disagrees(
    outcome: np.ndarray, outcome_members: np.ndarray, min_members: int = 1
) -> np.ndarray:
    """(B,) bool: at least `min_members` of the members' verdicts (M, B) differ from the main
    path's `outcome` (B,). `min_members=1`: any member (the shipped filter)."""
    return np.asarray((outcome_members != outcome[None, :]).sum(0) >= min_members)


def verdict(
    mode: str,
    outcome: np.ndarray,
    outcome_reencoded: np.ndarray,
    drift: np.ndarray,
    max_drift: float | None,
    outcome_members: np.ndarray,
    state_success: np.ndarray | None = None,
) -> tuple[np.ndarray, list[str]]:
    """The filter of `mode` (FILTERS) -> keep mask, reason per episode: '' kept, else the
    first failed check in the order 'outcome', 'drift' (re-encoded path), 'ensemble';
    'state' where the task's rule on the predicted end state (`state_success`, (B,) bool)
    contradicts the success head."""
    check_filter(mode, len(outcome_members), state_success is not None)
    b = len(outcome)
    reason = [""] * b
    if mode in ("reencode", "both"):
        _, reason = consistency(outcome, outcome_reencoded, drift, max_drift)
    if mode in ("ensemble", "both"):
        off = ensemble_disagrees(outcome, outcome_members)
        reason = [r or ("ensemble" if o else "") for r, o in zip(reason, off.tolist(), strict=True)]
    if mode == "state":
        assert state_success is not None
        off = state_disagrees(outcome, state_success)
        reason = ["state" if o else "" for o in off.tolist()]
    return np.array([r == "" for r in reason], bool), reason


def state_disagrees(outcome: np.ndarray, state_success: np.ndarray) -> np.ndarray:
    """(B,) bool: the success head (outcome 2) and the task's rule on the predicted end
    state (`state_success`) differ. A truncated or failed episode whose end state the rule
    calls a success disagrees too."""
    return np.asarray((np.asarray(outcome) == 2) != np.asarray(state_success, bool))


def check_filter(mode: str, members: int, state_rule: bool = False) -> None:
    if mode not in FILTERS:
        raise ValueError(f"filter={mode!r}: use one of {', '.join(FILTERS)}")
    if mode == "state" and not state_rule:
        raise ValueError(
            "filter='state' needs the task's success rule on states (state_rule=, "
            "unilab.worldmodel.state_rule.task_state_rule)"
        )
    if mode in ("ensemble", "both") and members < 1:
        raise ValueError(
            f"filter={mode!r} needs at least one ensemble member (a world model trained on "
            "the same data with another seed)"
        )


def check_members(main: LoadedWorldModel, members: Sequence[LoadedWorldModel]) -> None:
    """Every member must read and write what the main model does: same cameras, image size,
    proprioception (field and width), action width and horizon."""
    m = main.model
    want = {
        "cameras": m.cameras,
        "image size": m.size,
        "proprio_dim": m.proprio_dim,
        "action_dim": m.action_dim,
        "horizon": m.horizon,
        "proprio field": main.proprio_field,
    }
    for i, member in enumerate(members):
        k = member.model
        have = {
            "cameras": k.cameras,
            "image size": k.size,
            "proprio_dim": k.proprio_dim,
            "action_dim": k.action_dim,
            "horizon": k.horizon,
            "proprio field": member.proprio_field,
        }
        wrong = [
            f"{key} {have[key]!r} (main: {want[key]!r})" for key in want if have[key] != want[key]
        ]
        if wrong:
            raise WorldModelRunError(
                f"ensemble member {i} ({member.checkpoint}) differs from the main world model "
                f"in {', '.join(wrong)}: train every member on the same task.cameras, "
                "task.image_size, proprioception and actions (and algo.horizon)"
            )
