"""Re-tuning a loop's inference settings each round (`unilab improve --retune ROUNDS`).

Settings tuned for one policy are not safe for the next: on far-goal arm_move_to_goal
(stop 48) a round-1 policy scored 0.37 at its own defaults and 0.11 with the base's tuned
n_act 2 and ensembling. So with a `RetuneBudget` the loop runs `unilab tune-inference` on
every new run and executes that run's evaluation and the next round's rollouts with the
tuner's *recommendation* (its choice only where it beat the defaults on fresh episodes).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unilab.config.errors import ConfigError
from unilab.utils.atomic import atomic_write_text

TUNE_SEED_OFFSET = 500
"""A round's tuner starts at its rollout seed + this: tuning and rollouts see other scenes."""


@dataclass(frozen=True)
class RetuneBudget:
    """The tuner's budget per run: `rounds` bandit rounds of `episodes_per_round` episodes,
    then `compare_seeds` fresh seeds per arm (None: `rounds`) for the defaults-vs-choice
    check; `space` None is the tuner's default space."""

    rounds: int
    episodes_per_round: int = 8
    compare_seeds: int | None = None
    space: Mapping[str, Sequence[Any]] | None = None

    def __post_init__(self) -> None:
        if self.rounds < 1 or self.episodes_per_round < 1:
            raise ConfigError(
                f"--retune {self.rounds} and --retune-episodes {self.episodes_per_round} must "
                "be at least 1"
            )
        if self.compare_seeds is not None and self.compare_seeds < 1:
            raise ConfigError(f"--retune-compare-seeds {self.compare_seeds} must be at least 1")

    def episodes(self) -> int:
        """Episodes one tuning plays: the bandit's and both comparison arms'."""
        compare = self.rounds if self.compare_seeds is None else self.compare_seeds
        return self.episodes_per_round * (self.rounds + 2 * compare)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rounds": self.rounds,
            "episodes_per_round": self.episodes_per_round,
            "compare_seeds": self.compare_seeds,
            "space": None if self.space is None else {k: list(v) for k, v in self.space.items()},
            "episodes_per_tuning": self.episodes(),
        }


def check_retune_space(run: Path, budget: RetuneBudget) -> None:
    """ConfigError, before a loop writes anything, when `run`'s policy can use no setting
    of the budget's space (say best-of-N alone, without value heads)."""
    from unilab.deploy.policy_source import load_policy
    from unilab.deploy.tune_inference import DEFAULT_SPACE, TuneError, usable_space

    try:
        usable_space(
            load_policy(run).policy, DEFAULT_SPACE if budget.space is None else budget.space
        )
    except TuneError as exc:
        raise ConfigError(f"--retune for {run}: {exc}") from None


def retune(
    run: Path, out: Path, budget: RetuneBudget, seed: int, log: Callable[[str], None]
) -> dict[str, Any]:
    """Tune `run`'s inference settings with `budget` from task seed `seed`; writes the
    tune report to `out` and returns {recommended, recommendation, chosen, defaults,
    defaults_success, chosen_success, report}."""
    from unilab.deploy.policy_source import load_policy
    from unilab.deploy.sim_task import configs_for_policy
    from unilab.deploy.tune_inference import TuneError, tune_inference

    policy = load_policy(run)
    task_cfg, sim_cfg = configs_for_policy(
        policy.metadata.task_config, policy.metadata.sim_config, []
    )
    log(f"retune: {budget.episodes()} episodes of {run}")
    try:
        report = tune_inference(
            policy,
            task_cfg,
            sim_cfg,
            space=budget.space,
            rounds=budget.rounds,
            episodes_per_round=budget.episodes_per_round,
            seed=seed,
            compare_seeds=budget.compare_seeds,
        )
    except TuneError as exc:
        raise ConfigError(f"--retune: {exc}") from None
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, json.dumps(report, indent=2) + "\n")
    cmp = report["comparison"]
    summary = {
        "recommended": report["recommended"],
        "recommendation": report["recommendation"],
        "chosen": report["chosen"],
        "defaults": report["defaults"],
        "defaults_success": cmp["defaults"]["success_rate"],
        "chosen_success": cmp["chosen"]["success_rate"],
        "report": str(out),
        "seed": seed,
    }
    log(f"retune: recommended {report['recommended']}: {report['recommendation']}")
    return summary
