"""Learners. Importing this package registers every algorithm."""

from unilab.algos import appo, awr_flow, bc_flow, bc_mse, flow_ppo, ppo, sac, td3
from unilab.algos.registry import ALGORITHMS, register_algo

__all__ = [
    "ALGORITHMS",
    "appo",
    "awr_flow",
    "bc_flow",
    "bc_mse",
    "flow_ppo",
    "ppo",
    "register_algo",
    "sac",
    "td3",
]
