"""`unilab export`: a run's policy as ONNX (with metadata) and TorchScript."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from unilab.cli.verb import Verb
from unilab.config.errors import ConfigError

if TYPE_CHECKING:
    from unilab.deploy.inference_tuning import SettingValue


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", nargs="?", help="run directory")
    p.add_argument("--out", help="output directory (default: <run>/export)")
    p.add_argument(
        "--inference-settings",
        metavar="FILE",
        help="VLA runs: a `unilab tune-inference` report (its chosen settings) or a JSON "
        "object {setting: value}; n_act, ensemble_decay, noise_temperature and best_of_n "
        "go into the ONNX metadata deploy reads, guidance_scale and flow_steps into the graph",
    )


def _run(args: argparse.Namespace) -> int:
    from unilab.export.run_export import export_run
    from unilab.export.run_policy import RunDirError

    if not args.run:
        raise ConfigError("unilab export needs a run directory")
    settings = None
    if args.inference_settings:
        settings = read_settings(args.inference_settings)
    try:
        paths = export_run(Path(args.run), Path(args.out) if args.out else None, settings)
    except RunDirError as exc:
        raise ConfigError(str(exc)) from None
    for kind, path in paths.items():
        print(f"{kind}: {path}")
    return 0


def read_settings(path: str) -> dict[str, SettingValue]:
    """The inference settings in a tune report or a JSON object file; a ConfigError if not."""
    import json

    from unilab.deploy.tune_inference import TuneError, settings_of

    try:
        doc = json.loads(Path(path).read_text())
        if not isinstance(doc, dict):
            raise TuneError(f"expected a JSON object, got {type(doc).__name__}")
        return dict(settings_of(doc))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--inference-settings {path}: {exc}") from None


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
