"""unilab.export."""
