"""unilab.tasks."""
