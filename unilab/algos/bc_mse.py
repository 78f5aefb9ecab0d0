"""`bc_mse`: the plain baseline for `bc_flow`: the same encoders and prefix, with a
regression head (Gaussian, mean trained by MSE) instead of flow matching, so the value of
flow matching is measured, not assumed. Same data path, augmentation, EMA and validation
(`unilab.algos.behavior_cloning`).
"""

from __future__ import annotations

from dataclasses import dataclass

from unilab.algos.behavior_cloning import BCConfig, BehaviorCloning
from unilab.algos.registry import register_algo


@dataclass
class BCMSEConfig(BCConfig):
    name: str = "bc_mse"


@register_algo("bc_mse", BCMSEConfig)
class BCMSE(BehaviorCloning):
    """VLA encoders with an MSE (Gaussian) chunk head: the regression baseline (offline)."""

    head = "mse"
