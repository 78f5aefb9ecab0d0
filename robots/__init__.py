"""unilab.robots."""
