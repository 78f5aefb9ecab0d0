"""Learners. Importing this package registers every algorithm."""

from unilab.algos import appo, ppo, sac, td3
from unilab.algos.registry import ALGORITHMS, register_algo

__all__ = ["ALGORITHMS", "appo", "ppo", "register_algo", "sac", "td3"]
