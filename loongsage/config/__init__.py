from loongsage.config.rules import ConfigError, check
from loongsage.config.schema import (
    AgentConfig,
    AlgorithmConfig,
    ClusterConfig,
    ContainerConfig,
    Config,
    DataConfig,
    DataMixEntry,
    LoggingConfig,
    ModelConfig,
    PipelineConfig,
    RoleConfig,
    RolesConfig,
    RolloutRoleConfig,
    RolloutConfig,
    RunConfig,
    TrainerConfig,
)
from loongsage.config.store import register, to_config

__all__ = [
    "AgentConfig", "AlgorithmConfig", "ClusterConfig", "ContainerConfig", "Config", "ConfigError", "DataConfig", "DataMixEntry", "LoggingConfig", "ModelConfig", "PipelineConfig", "RoleConfig", "RolesConfig", "RolloutRoleConfig",
    "RolloutConfig", "RunConfig", "TrainerConfig", "check", "register", "to_config",
]
