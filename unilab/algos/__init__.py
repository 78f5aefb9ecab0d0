"""Learners. Importing this package registers every algorithm."""

from unilab.algos import ppo
from unilab.algos.registry import ALGORITHMS, register_algo

__all__ = ["ALGORITHMS", "ppo", "register_algo"]
