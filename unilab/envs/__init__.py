"""Adapters that present unilab tasks through other libraries' env APIs."""

from unilab.envs.gym_vector import TaskEnv, TaskVectorEnv

__all__ = ["TaskEnv", "TaskVectorEnv"]
