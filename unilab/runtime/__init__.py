"""unilab.runtime."""
