"""unilab.worldmodel."""
