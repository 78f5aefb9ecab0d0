"""unilab.viz."""
