from loongsage.config.rules import ConfigError, check
from loongsage.config.schema import (
    AgentConfig,
    AlgorithmConfig,
    Config,
    DataConfig,
    DataMixEntry,
    LoggingConfig,
    ModelConfig,
    PipelineConfig,
    RolloutConfig,
    RunConfig,
    TrainerConfig,
)
from loongsage.config.store import register, to_config

__all__ = [
    "AgentConfig", "AlgorithmConfig", "Config", "ConfigError", "DataConfig", "DataMixEntry", "LoggingConfig", "ModelConfig", "PipelineConfig",
    "RolloutConfig", "RunConfig", "TrainerConfig", "check", "register", "to_config",
]
