"""Training: the learner loop and checkpoints."""

from unilab.train.loop import train

__all__ = ["train"]
