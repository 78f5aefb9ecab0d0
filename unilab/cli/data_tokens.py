"""`unilab data tokens`: discover exploration tokens in a store's demonstrations.

    unilab data tokens STORE [--tokens 4] [--granularity episode|frame] [--seed 0]
                             [--dry-run] [--json]

Exit codes as for the other `unilab data` verbs: 0 done, 2 bad input (one message).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from unilab.cli.data import store_errors
from unilab.cli.verb import Verb
from unilab.config.errors import ConfigError

NOTE = (
    "Features are z-scored action trajectories (episode granularity: each episode resampled "
    "to --points instants; frame granularity: the --horizon-frame chunk from each frame), "
    "clustered by k-means (k-means++ seeding, --restarts runs, one seed for every draw), so "
    "a seed gives the same tokens. Tokens go into the store's `token` column (replaced "
    "atomically; nothing else changes); train with them by `algo=bc_flow algo.tokens=K`. "
    "Where the store records the experts' strategy (`mode`), the report gives the adjusted "
    "Rand index and each token's purity. See docs/vla.md."
)


def _arguments(p: argparse.ArgumentParser) -> None:
    from unilab.data.token_discovery import GRANULARITIES, TokenDiscoveryConfig

    d = TokenDiscoveryConfig()
    p.add_argument("store", help="episode store to label (opened for writing unless --dry-run)")
    p.add_argument("--tokens", type=int, default=d.tokens, help="K tokens (default %(default)s)")
    p.add_argument(
        "--granularity",
        default=d.granularity,
        choices=GRANULARITIES,
        help="one token per episode or per frame (default %(default)s)",
    )
    for name in ("points", "horizon", "restarts", "iterations", "seed"):
        value = getattr(d, name)
        p.add_argument(
            "--" + name, type=int, default=value, help=f"(default {value}; TokenDiscoveryConfig)"
        )
    p.add_argument("--field", default=d.action_field, help="action field (default %(default)s)")
    p.add_argument(
        "--ground-truth",
        default="mode",
        help="column of the experts' strategy ids to score against (default %(default)s)",
    )
    p.add_argument("--dry-run", action="store_true", help="report only; write nothing")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def format_report(doc: dict[str, Any]) -> str:
    verb = "wrote" if doc["written"] else "found (dry run, nothing written)"
    lines = [
        f"{verb} {doc['tokens']} tokens ({doc['granularity']} granularity, seed {doc['seed']}) "
        f"for {doc['frames']} frames of {doc['episodes']} episodes in {doc['store']}",
        "  frames per token: " + ", ".join(f"{t}: {c}" for t, c in enumerate(doc["counts"])),
    ]
    if "ari" in doc:
        purity = ", ".join(f"{p:.2f}" for p in doc["purity"])
        lines.append(
            f"  against `{doc['ground_truth']}`: adjusted Rand index {doc['ari']:.3f}; "
            f"purity per token {purity}"
        )
    return "\n".join(lines)


def _run(args: argparse.Namespace) -> int:
    from unilab.data.token_discovery import TokenDiscoveryConfig, discover_store_tokens

    cfg = TokenDiscoveryConfig(
        tokens=args.tokens,
        granularity=args.granularity,
        points=args.points,
        horizon=args.horizon,
        restarts=args.restarts,
        iterations=args.iterations,
        seed=args.seed,
        action_field=args.field,
    )
    problems = cfg.problems()
    if problems:
        raise ConfigError("; ".join("--" + p for p in problems))
    with store_errors():
        doc = discover_store_tokens(
            args.store, cfg, write=not args.dry_run, mode_field=args.ground_truth
        )
    print(json.dumps(doc, indent=1) if args.json else format_report(doc))
    return 0


VERBS = [
    Verb(
        "tokens",
        "discover exploration tokens (behaviour modes) in a store's demonstrations",
        _run,
        _arguments,
        description="Cluster the store's action trajectories into K tokens and write each "
        "frame's token into the store's `token` column (unilab.data.token_discovery). " + NOTE,
        parent="data",
        order=64,
    ),
]
