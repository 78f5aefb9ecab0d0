"""Training: the `Runner` (the learner loop), its hooks, checkpoints and run directories.

`train(cfg)` runs the loop with the train-level hooks the config asks for (mid-run
evaluation). Recording, Rerun, export and play are tool hooks from higher layers:
`unilab.workflows.train` attaches them too and is what `unilab train` runs.
"""

from unilab.train.hooks import IterationInfo, RunResult, TrainHook
from unilab.train.runner import Runner
from unilab.train.session import train

__all__ = ["IterationInfo", "RunResult", "Runner", "TrainHook", "train"]
