"""unilab.teleop."""
