"""unilab.sim."""
