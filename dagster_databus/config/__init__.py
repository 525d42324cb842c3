"""Configuration: the YAML file named by ``DATABUS_CONFIG`` (default: the embedded demo).

Loading checks the file's shape and every identifier, and resolves relative paths against
the file's folder. It touches no database and writes nothing; ``capture.validate`` checks
the databases themselves before a run writes anything.

``fields`` holds what every source shares, ``sources`` one model per source kind, ``model`` the
whole config, ``loading`` the file. The names below are what the rest of the package imports.
"""

from dagster_databus.config.fields import (
    PollConfig,
    ReconcileConfig,
    RetentionConfig,
    SchemaChanges,
    TableConfig,
    UpkeepConfig,
    VerifyConfig,
)
from dagster_databus.config.loading import CONFIG_ENV, DEMO_CONFIG, config_path_from_env, load_config, parse_config
from dagster_databus.config.model import (
    DatabusConfig,
    LogicalPartConfig,
    LogicalTableConfig,
    MergeConfig,
    MergeEngineName,
    SparkConfig,
)
from dagster_databus.config.sources import (
    SUPPORTED_KINDS,
    FailoverConfig,
    MysqlSourceConfig,
    MysqlTlsConfig,
    OracleSourceConfig,
    PostgresSourceConfig,
    SourceConfig,
    SqliteSourceConfig,
    StandbyConfig,
    TlsMode,
)

__all__ = [
    "CONFIG_ENV",
    "DEMO_CONFIG",
    "SUPPORTED_KINDS",
    "DatabusConfig",
    "FailoverConfig",
    "LogicalPartConfig",
    "LogicalTableConfig",
    "MergeConfig",
    "MergeEngineName",
    "MysqlSourceConfig",
    "MysqlTlsConfig",
    "OracleSourceConfig",
    "PollConfig",
    "PostgresSourceConfig",
    "ReconcileConfig",
    "RetentionConfig",
    "SchemaChanges",
    "SourceConfig",
    "SparkConfig",
    "SqliteSourceConfig",
    "StandbyConfig",
    "TableConfig",
    "TlsMode",
    "UpkeepConfig",
    "VerifyConfig",
    "config_path_from_env",
    "load_config",
    "parse_config",
]
