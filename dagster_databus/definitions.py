"""Dagster entry point (``dagster dev -w workspace.yaml``): assembles definitions from the config
named by ``DATABUS_CONFIG`` (default: the embedded demo config)."""

from dagster_databus.config import config_path_from_env, load_config
from dagster_databus.defs.factory import build_definitions
from dagster_databus.defs.resources import DatabusResource

defs = build_definitions(load_config(config_path_from_env()), DatabusResource.for_file(config_path_from_env()))
