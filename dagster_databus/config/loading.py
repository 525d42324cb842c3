"""Reading a config file: YAML (a key given twice refused), the lake's location, relative paths taken
from the file's folder, and pydantic's complaints turned into ``ConfigError`` s naming field and fix."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from dagster_databus.config.model import DatabusConfig
from dagster_databus.config.sources import SUPPORTED_KINDS
from dagster_databus.errors import ConfigError, LakeLocationError
from dagster_databus.storage.lake import Lake

CONFIG_ENV = "DATABUS_CONFIG"
DEMO_CONFIG = Path(__file__).resolve().parents[2] / "config" / "demo.yaml"


def config_path_from_env() -> Path:
    return Path(os.environ.get(CONFIG_ENV) or DEMO_CONFIG)


def load_config(path: str | Path | None = None) -> DatabusConfig:
    """Read and validate a config file; raise ``ConfigError`` naming the field and the fix."""
    file = Path(path) if path is not None else config_path_from_env()
    try:
        text = file.read_text()
    except OSError as exc:
        if path is not None and os.environ.get(CONFIG_ENV) != str(path):  # named by the caller (--config)
            raise ConfigError(str(file), f"cannot read config file {file}: {exc.strerror or exc}",
                              "pass the path of a readable YAML file (--config)") from None
        raise ConfigError(
            CONFIG_ENV, f"cannot read config file {file}: {exc.strerror or exc}",
            f"point {CONFIG_ENV} at a readable YAML file",
        ) from None
    try:
        raw = yaml.load(text, Loader=_UniqueKeyLoader)
    except _DuplicateKeyError as exc:
        raise ConfigError(str(file), str(exc), "keep one of them: YAML takes the last silently, which is rarely "
                          "what was meant") from None
    except yaml.YAMLError as exc:
        raise ConfigError(str(file), f"not valid YAML: {exc}", "fix the YAML syntax at the line shown") from None
    return parse_config(raw, base=file.resolve().parent, origin=file)


class _DuplicateKeyError(yaml.YAMLError):
    pass


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (``lake:`` twice, the second ``/``)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                first = seen[key].start_mark.line + 1
                raise _DuplicateKeyError(f"key {key!r} is given twice in one mapping (lines {first} and "
                                         f"{key_node.start_mark.line + 1})")
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def parse_config(raw: Any, base: Path, origin: Path | None = None) -> DatabusConfig:
    if not isinstance(raw, dict):
        raise ConfigError("(top level)", "the config must be a mapping with 'lake' and 'sources'",
                          "start from the example in README.md")
    if "lake" in raw:
        raw = {**raw, "lake": _lake(raw["lake"], raw.get("storage_options"), base)}
    for i, source in enumerate(raw.get("sources") or []):
        if isinstance(source, dict) and source.get("kind") not in SUPPORTED_KINDS:
            raise ConfigError(
                f"sources[{i}].kind", f"unknown source kind {source.get('kind')!r}",
                f"use one of: {', '.join(SUPPORTED_KINDS)}",
            )
    try:
        config = DatabusConfig.model_validate({**raw, "path": origin})
    except ValidationError as exc:
        raise _config_error(exc) from None
    return _resolve_paths(config, base)


def _lake(lake: Any, options: Any, base: Path) -> Any:
    """The ``lake:`` value (a folder, ``file://``, ``s3://``, ``gs://``, ``az://``/``abfss://``) with its
    ``storage_options``; a relative folder is taken from the config's folder."""
    if not isinstance(lake, str | Path):
        return lake  # pydantic names the type error
    if options is not None and not (isinstance(options, dict) and all(isinstance(k, str) for k in options)):
        raise ConfigError("storage_options", "must be a mapping of option names to values",
                          "write storage_options as a YAML mapping, e.g. AWS_REGION: eu-west-1")
    try:
        return Lake.parse(str(lake), base=base, options={k: str(v) for k, v in (options or {}).items()})
    except LakeLocationError as exc:
        field = "storage_options" if "storage option" in str(exc) else "lake"
        raise ConfigError(field, str(exc), "give the lake as a folder (absolute or relative to the config) or a "
                          "URI such as s3://bucket/prefix; see README.md, \"Configuration\"") from None


def _resolve_paths(config: DatabusConfig, base: Path) -> DatabusConfig:
    def resolve(p: Path) -> Path:
        p = p.expanduser()
        return p if p.is_absolute() else (base / p).resolve()

    sources = tuple(s.resolved(resolve).in_lake(config.lake.location.uri) for s in config.sources)
    spark = config.spark
    if spark.delta_jars is not None:
        spark = spark.model_copy(update={"delta_jars": resolve(spark.delta_jars)})
    merge = config.merge
    if merge.spill_dir is not None:
        merge = merge.model_copy(update={"spill_dir": resolve(merge.spill_dir)})
    return config.model_copy(update={"sources": sources, "spark": spark,
                                     "merge": merge})


def _config_error(exc: ValidationError) -> ConfigError:
    err = exc.errors()[0]
    loc = _format_loc(err["loc"])
    kind = err["type"]
    msg = err["msg"].removeprefix("Value error, ")
    if kind == "missing":
        return ConfigError(loc, "required field is missing", f"add '{loc.rsplit('.', 1)[-1]}' to the config")
    if kind == "extra_forbidden":
        return ConfigError(loc, "unknown field", "remove it or check its spelling against README.md")
    return ConfigError(loc, msg, "correct the value as described; README.md lists every field")


def _format_loc(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in SUPPORTED_KINDS:  # the discriminator tag pydantic inserts into the path
            continue
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"
