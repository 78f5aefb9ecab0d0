"""`bc_flow`: imitation learning of the flow-matching VLA from an episode store (offline).

The policy (`unilab.policies.vla`) regresses the flow velocity of action chunks (pi0
convention, see `unilab.policies.vla.flow`); everything else (augmentation, EMA, held-out
validation, checkpoints) is `unilab.algos.behavior_cloning`; the offline loop is
`unilab.algos.offline.train_offline`.
"""

from __future__ import annotations

from dataclasses import dataclass

from unilab.algos.behavior_cloning import BCConfig, BehaviorCloning
from unilab.algos.registry import register_algo


@dataclass
class BCFlowConfig(BCConfig):
    name: str = "bc_flow"


@register_algo("bc_flow", BCFlowConfig)
class BCFlow(BehaviorCloning):
    """Flow-matching VLA imitation from stored action chunks (offline)."""

    head = "flow"
