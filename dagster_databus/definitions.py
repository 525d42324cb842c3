"""Dagster entry point (``dagster dev -w workspace.yaml``): assembles definitions from the config
named by ``DATABUS_CONFIG`` (default: the embedded demo config)."""

from dagster_databus.config import config_path_from_env, load_config
from dagster_databus.defs.factory import build_definitions

defs = build_definitions(load_config(config_path_from_env()), config_path_from_env())
