"""`unilab collect`: scripted-expert demonstrations of a tabletop task into an episode store.

    unilab collect task=arm_pick_place episodes=200 store=demos.zarr [expert=scripted]
                   [workers=2] [envs=16] [seed=0] [keep_failed=false] [action_noise=0]
                   [mode_shares=push:0.7,carry:0.3] [task.* sim.* overrides]

`episodes` is how many episodes of the task the store should hold: the same command after
an interruption (or on a store holding other tasks) collects only the rest.
"""

from __future__ import annotations

import argparse
import json
import sys

from unilab.cli.options import add_overrides
from unilab.cli.verb import EXIT_INTERRUPTED, Verb
from unilab.config.errors import ConfigError

OWN_KEYS = {
    "episodes": int,
    "store": str,
    "expert": str,
    "workers": int,
    "envs": int,
    "seed": int,
    "keep_failed": bool,
    "chunk_len": int,
    "action_noise": float,
    "mode_shares": dict,
}
"""The verb's own key=value settings (everything else is a config override)."""
CONFIG_KEYS = ("task", "task.", "sim.", "runtime.max_ring_mb")


def _value(key: str, text: str) -> object:
    kind = OWN_KEYS[key]
    if kind is bool:
        low = text.lower()
        if low not in ("true", "false", "1", "0", "yes", "no"):
            raise ConfigError(f"{key}={text!r} must be true or false")
        return low in ("true", "1", "yes")
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"{key}={text!r} must be an integer") from None
    if kind is float:
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f"{key}={text!r} must be a number") from None
    if kind is dict:
        return _shares(key, text)
    return text


def _shares(key: str, text: str) -> dict[str, float]:
    """{mode: share} from "push:0.7,carry:0.3"."""
    shares: dict[str, float] = {}
    for part in text.split(","):
        name, sep, share = part.partition(":")
        try:
            if not sep or not name.strip():
                raise ValueError
            shares[name.strip()] = float(share)
        except ValueError:
            raise ConfigError(
                f"{key}={text!r} must be mode:share pairs, e.g. {key}=push:0.7,carry:0.3"
            ) from None
    return shares


def split_settings(items: list[str]) -> tuple[dict[str, object], list[str]]:
    """(the verb's own settings, config overrides) from key=value words."""
    own: dict[str, object] = {}
    overrides: list[str] = []
    for item in items:
        key, sep, text = item.partition("=")
        if not sep:
            raise ConfigError(f"argument {item!r} is not of the form key=value")
        if key in OWN_KEYS:
            own[key] = _value(key, text)
        elif key == CONFIG_KEYS[0] or key.startswith(CONFIG_KEYS[1:3]) or key == CONFIG_KEYS[3]:
            overrides.append(item)
        else:
            raise ConfigError(
                f"unilab collect does not take {key!r}; it takes {', '.join(OWN_KEYS)} and "
                "task=, task.*, sim.*, runtime.max_ring_mb overrides"
            )
    return own, overrides


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    add_overrides(p)


def _run(args: argparse.Namespace) -> int:
    from unilab.config.compose import compose
    from unilab.data.collect import collect
    from unilab.data.errors import EpisodeStoreError

    own, overrides = split_settings(list(args.items))
    missing = [k for k in ("store", "episodes") if k not in own]
    if not any(o.startswith("task=") for o in overrides):
        missing.insert(0, "task")
    if missing:
        raise ConfigError(
            f"unilab collect needs {', '.join(f'{k}=...' for k in missing)}, e.g. "
            "unilab collect task=arm_pick_place episodes=200 store=demos.zarr"
        )
    cfg = compose(overrides)
    try:
        result = collect(
            str(own["store"]),
            cfg.task,
            int(own["episodes"]),  # type: ignore[call-overload]
            sim=cfg.sim,
            expert=str(own.get("expert", "scripted")),
            workers=own.get("workers"),  # type: ignore[arg-type]
            envs_per_worker=int(own.get("envs", 16)),  # type: ignore[call-overload]
            chunk_len=int(own.get("chunk_len", 16)),  # type: ignore[call-overload]
            seed=int(own.get("seed", 0)),  # type: ignore[call-overload]
            keep_failed=bool(own.get("keep_failed", False)),
            action_noise=float(own.get("action_noise", 0.0)),  # type: ignore[arg-type]
            mode_shares=own.get("mode_shares"),  # type: ignore[arg-type]
            max_ring_mb=cfg.runtime.max_ring_mb,
            quiet=args.quiet,
        )
    except EpisodeStoreError as exc:
        raise ConfigError(str(exc)) from None
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
    else:
        rate = result.success_rate
        print(
            f"collected {result.kept} episodes ({result.frames:,} frames) of {result.task} "
            f"into {result.store} in {result.seconds:.0f} s; {result.attempted} finished, "
            f"success {'-' if rate is None else f'{100 * rate:.1f} %'}; the store holds "
            f"{result.existing + result.kept} of {result.target}"
        )
    if result.interrupted:
        print(
            "unilab collect: interrupted; run the same command again to collect the rest",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    return 1 if result.gave_up else 0


VERBS = [
    Verb(
        "collect",
        "record scripted-expert demonstrations of a task into an episode store",
        _run,
        _arguments,
        description="Collect episodes of a tabletop task with its scripted expert, in parallel "
        "worker processes, into an episode store (unilab.data.collect.collect). "
        "episodes=N is how many episodes of the task the store should hold: a rerun after an "
        "interruption collects the rest, with new seeds. Only successful episodes are kept "
        "unless keep_failed=true. Each episode records its seed, instruction, success and "
        "the expert's mode (metadata tags; every frame in the `mode` column). Settings: "
        "task=NAME, episodes=N, store=PATH, expert=scripted, workers=N (default: the usable "
        "cores), envs=N per worker (16), seed=S (first seed of a new store), keep_failed, "
        "chunk_len, action_noise=STD (execute the expert's actions plus Gaussian noise, "
        "record the clean ones: demonstrations with recoveries, DART), mode_shares=MODE:SHARE,... "
        "(how often the expert draws each strategy; default uniform), and task.*, sim.*, "
        "runtime.max_ring_mb config overrides.",
        order=20,
    )
]
