"""unilab.export: a run's policy as ONNX (with metadata) and TorchScript.

Import the submodules directly; this package imports nothing heavy so that the torch-free
deploy side can read `unilab.export.metadata`.
"""
