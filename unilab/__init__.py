"""unilab: robot learning on batched MuJoCo with a heterogeneous CPU-sim / accelerator-learner loop."""

__version__ = "0.1.0"
