"""Typed, validated configuration (OmegaConf structured configs)."""

from unilab.config.checks import checked
from unilab.config.compose import compose, list_presets, to_yaml
from unilab.config.errors import ConfigError
from unilab.config.schema import (
    DEFAULT_TASK,
    AlgoConfig,
    Config,
    LoggingConfig,
    RunConfig,
    RuntimeConfig,
    SimConfig,
    TaskConfig,
)

__all__ = [
    "DEFAULT_TASK",
    "AlgoConfig",
    "Config",
    "ConfigError",
    "LoggingConfig",
    "RunConfig",
    "RuntimeConfig",
    "SimConfig",
    "TaskConfig",
    "checked",
    "compose",
    "list_presets",
    "to_yaml",
]
