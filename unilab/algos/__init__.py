"""unilab.algos."""
