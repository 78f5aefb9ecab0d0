"""Library functions behind the CLI verbs that compose several layers.

`unilab.workflows.train.train(cfg)` is `unilab train`: the `Runner` with the standard hooks
(episode recording, Rerun recordings, mid-run evaluation, export and play at the end). It
sits above the tools (`export`, `deploy`, `viz`, `data`) because it wires them into the
training loop, which itself imports none of them.
"""
