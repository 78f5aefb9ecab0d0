"""unilab.utils."""
