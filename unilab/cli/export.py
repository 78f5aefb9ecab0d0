"""`unilab export`: a run's policy as ONNX (with metadata) and TorchScript."""

from __future__ import annotations

import argparse
from pathlib import Path

from unilab.cli.verb import Verb
from unilab.config.errors import ConfigError


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", nargs="?", help="run directory")
    p.add_argument("--out", help="output directory (default: <run>/export)")


def _run(args: argparse.Namespace) -> int:
    from unilab.export.run_export import export_run
    from unilab.export.run_policy import RunDirError

    if not args.run:
        raise ConfigError("unilab export needs a run directory")
    try:
        paths = export_run(Path(args.run), Path(args.out) if args.out else None)
    except RunDirError as exc:
        raise ConfigError(str(exc)) from None
    for kind, path in paths.items():
        print(f"{kind}: {path}")
    return 0


VERBS = [
    Verb(
        "export",
        "export a run's policy to ONNX and TorchScript",
        _run,
        _arguments,
        description="Write <run>/export/policy.onnx (with metadata), policy.pt (TorchScript) "
        "and metadata.json from the newest good checkpoint.",
        order=20,
    )
]
