"""unilab.policies."""
