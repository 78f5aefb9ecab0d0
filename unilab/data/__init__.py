"""unilab.data."""
