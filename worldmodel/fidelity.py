"""Open-loop fidelity of a world model against the copy-last-frame baseline.

From start frames of stored episodes, the model is rolled forward chunk by chunk with the
actions that were actually executed (no re-encoding of true frames on the way), and after
each chunk its prediction is compared with the stored truth H, 2H, ... steps ahead:

- latent error: |z^ - encode(true frame)|^2 per latent element;
- PSNR of the decoded frames against the true frames (pixels in [0, 1]);
- proprioception error in normalized units.

The copy-last-frame baseline predicts that nothing moves: latent z_start, the start frame
itself (exact pixels, no autoencoder blur), the start proprioception. A model is useful
for generation where it beats that baseline; the curves say up to which horizon.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from unilab.algos.build import observation_shapes
from unilab.config.compose import config_from_yaml
from unilab.data.store import EpisodeStore
from unilab.train.runner import probe_task
from unilab.utils.checkpoint import CheckpointError, load_latest_good
from unilab.worldmodel.learner import model_from_shapes
from unilab.worldmodel.model import WorldModel, to_unit


class WorldModelRunError(ValueError):
    """A path that is not a usable world-model run; the message says what is wrong."""


@dataclass
class LoadedWorldModel:
    model: WorldModel
    proprio_field: str
    checkpoint: Path
    step: int


def load_world_model(run_dir: Path) -> LoadedWorldModel:
    """The world model of a run directory's newest good checkpoint, on the CPU, eval mode."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise WorldModelRunError(f"run directory not found: {run_dir}")
    try:
        path, state, _ = load_latest_good(run_dir / "checkpoints", map_location="cpu")
    except CheckpointError as exc:
        raise WorldModelRunError(f"{run_dir} has no usable checkpoint: {exc}") from None
    cfg = config_from_yaml(str(state["config"]))
    if cfg.algo.name != "world_model":
        raise WorldModelRunError(
            f"{run_dir} trained algo={cfg.algo.name}, not a world model (algo=world_model)"
        )
    shapes = probe_task(cfg)
    model = model_from_shapes(cfg.algo, observation_shapes(shapes), shapes.action_dim)
    model.load_state_dict(state["algo"]["model"])
    return LoadedWorldModel(model.eval(), cfg.algo.proprio_field, path, int(state["algo"]["step"]))


def _psnr(pred: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """Per image (B, cams) PSNR in dB of pixels in [0, 1] (capped at 60 dB for exact copies)."""
    mse = (pred - truth).square().flatten(2).mean(2).clamp_min(1e-6)
    return -10.0 * torch.log10(mse)


def transition_starts(lengths: Sequence[int], span: int) -> list[tuple[int, int]]:
    """(episode position, start frame) pairs: non-overlapping windows of `span` steps that
    fit inside each episode (frame start + span must exist)."""
    return [(i, s) for i, n in enumerate(lengths) for s in range(0, n - span, span)]


@torch.no_grad()
def open_loop(
    loaded: LoadedWorldModel,
    store_path: Path,
    *,
    episodes: Sequence[int] | None = None,
    chunks: int = 4,
    max_windows: int = 256,
    frames_out: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Error vs horizon over windows of `chunks` chunks from the given stored episodes
    (default: all); JSON-ready. With `frames_out`, the first window's decoded and true
    frames (uint8, start included) go there as {"steps", "model", "real"}."""
    if chunks < 1:
        raise ValueError(f"chunks must be at least 1, got {chunks}")
    m, pf = loaded.model, loaded.proprio_field
    h = m.horizon
    span = h * chunks
    fields = [f"images/{c}" for c in m.cameras] + ["action"] + ([pf] if m.proprio_dim else [])
    with EpisodeStore.open(store_path, "r") as store:
        missing = [f for f in fields if f not in store.schema.fields]
        if missing:
            raise WorldModelRunError(
                f"{store_path} lacks field(s) {missing} the world model reads; it has "
                f"{sorted(store.schema.fields)}"
            )
        ids = list(range(len(store))) if episodes is None else list(episodes)
        data = [store.episode(i, fields) for i in ids]
    windows = transition_starts([len(d["action"]) for d in data], span)[:max_windows]
    if not windows:
        raise WorldModelRunError(
            f"no episode of {store_path} (of {len(data)} chosen) is longer than "
            f"{span} steps (chunks={chunks} x horizon {h}); use fewer chunks"
        )

    def gather(name: str, offset: int) -> np.ndarray:
        return np.stack([data[i][name][s + offset] for i, s in windows])

    def frames_at(offset: int) -> dict[str, torch.Tensor]:
        return {c: torch.from_numpy(gather(f"images/{c}", offset)) for c in m.cameras}

    def proprio_at(offset: int) -> torch.Tensor:
        if not m.proprio_dim:
            return torch.zeros(len(windows), 0)
        return m.proprio_norm(torch.from_numpy(gather(pf, offset)))

    def unit(frames: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.stack([to_unit(frames[c]) for c in m.cameras], 1)

    start = frames_at(0)
    z = z0 = m.encode(start)
    p = p0 = proprio_at(0)
    x0 = unit(start)
    pad = torch.zeros(len(windows), h, dtype=torch.bool)
    shown: dict[str, list[np.ndarray]] = {
        f"{w}/{c}": [] for w in ("model", "real") for c in m.cameras
    }

    def keep(who: str, images: torch.Tensor) -> None:  # (B, cams, 3, S, S) in [0, 1]
        for i, c in enumerate(m.cameras):
            frame = (images[0, i].clamp(0, 1) * 255).round().to(torch.uint8).movedim(0, -1)
            shown[f"{who}/{c}"].append(frame.numpy())

    keep("model", m.decode(z0))
    keep("real", x0)
    rows: dict[str, dict[str, list[float]]] = {
        "model": {"latent_mse": [], "psnr_db": [], "proprio_mse": []},
        "copy_last": {"latent_mse": [], "psnr_db": [], "proprio_mse": []},
    }
    for k in range(chunks):
        acts = np.stack([data[i]["action"][s + k * h : s + (k + 1) * h] for i, s in windows])
        z, p, _, _, _ = m.predict(z, p, torch.from_numpy(acts).to(torch.float32), pad)
        truth = frames_at((k + 1) * h)
        z_true, x_true, p_true = m.encode(truth), unit(truth), proprio_at((k + 1) * h)
        keep("model", m.decode(z))
        keep("real", x_true)
        for name, (zz, xx, pp) in (
            ("model", (z, m.decode(z), p)),
            ("copy_last", (z0, x0, p0)),
        ):
            rows[name]["latent_mse"].append(float((zz - z_true).square().mean()))
            rows[name]["psnr_db"].append(float(_psnr(xx, x_true).mean()))
            rows[name]["proprio_mse"].append(
                float((pp - p_true).square().mean()) if m.proprio_dim else math.nan
            )
    if frames_out is not None:
        frames_out["steps"] = [h * k for k in range(chunks + 1)]
        for who in ("model", "real"):
            frames_out[who] = {c: np.stack(shown[f"{who}/{c}"]) for c in m.cameras}
    return {
        "horizon_steps": [h * (k + 1) for k in range(chunks)],
        "windows": len(windows),
        "episodes": len(data),
        "checkpoint": loaded.checkpoint.name,
        "step": loaded.step,
        **rows,
    }


def plot_fidelity(doc: dict[str, Any], path: Path, title: str = "") -> Path:
    """Three panels (latent error, PSNR, proprioception error) vs horizon, model vs copy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = doc["horizon_steps"]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
    for ax, key, label in zip(
        axes,
        ("latent_mse", "psnr_db", "proprio_mse"),
        ("latent MSE", "PSNR (dB, higher is better)", "proprio MSE (normalized)"),
        strict=True,
    ):
        ax.plot(x, doc["model"][key], "o-", label="world model")
        ax.plot(x, doc["copy_last"][key], "s--", label="copy last frame")
        ax.set_xlabel("steps ahead (open loop)")
        ax.set_title(label, fontsize=9)
    axes[0].legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
