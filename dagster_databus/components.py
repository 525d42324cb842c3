"""``DatabusComponent``: change data capture added to a user's own Dagster project as a component (``dg scaffold
defs dagster_databus.components.DatabusComponent <folder>``, then ``dg check defs``, ``dg list defs``, ``dg launch``).

Its YAML's ``attributes`` take the config file's schema (README.md, "Configuration reference"): ``lake``,
``storage_options``, ``sources``, ``logical_tables``, ``spark``, ``merge``, relative paths taken from the folder of
``defs.yaml``; or ``config_file``, a databus config file of its own. The definitions are those of the workspace's
``dagster_databus.definitions`` (``defs.factory``), with the databus executor on their own jobs only: the
project's other jobs keep theirs. This module is the ``dagster_dg_cli.registry_modules`` entry point that ``dg``
finds it by (pyproject.toml).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
from dagster.components import (
    Component,
    ComponentLoadContext,
    Model,
    Resolvable,
    Scaffolder,
    ScaffoldRequest,
    scaffold_component,
    scaffold_with,
)
from pydantic import BaseModel, Field, model_validator

from dagster_databus.config import DatabusConfig, load_config, parse_config
from dagster_databus.defs.factory import build_definitions
from dagster_databus.defs.resources import DatabusResource
from dagster_databus.sources.registry import KINDS, embedded_kind


class DatabusScaffoldParams(BaseModel):
    """``dg scaffold defs ... --kind K --lake L``: the source kind the starter YAML holds, and the lake."""

    kind: str = Field(default_factory=lambda: embedded_kind().name,
                      description=f"the starter source's kind: one of {', '.join(KINDS)}")
    # Outside the code's folders by default: the project's root, which Dagster renders into the YAML's text.
    lake: str = Field(default="{{ context.project_root }}/.databus/lake",
                      description="where the change log and snapshots go: a folder (relative: to defs.yaml's) or an "
                                  "s3://, gs://, az:// URI")


class DatabusScaffolder(Scaffolder[DatabusScaffoldParams]):
    """Writes a ``defs.yaml`` with one source of the chosen kind, its settings the registry's example, for the user
    to edit."""

    @classmethod
    def get_scaffold_params(cls) -> type[DatabusScaffoldParams]:
        return DatabusScaffoldParams

    def scaffold(self, request: ScaffoldRequest[DatabusScaffoldParams]) -> None:
        params = request.params or DatabusScaffoldParams()
        if params.kind not in KINDS:
            raise ValueError(f"--kind {params.kind!r} is not a source kind: use one of {', '.join(KINDS)}")
        kind = KINDS[params.kind]
        source = {"name": "app", "kind": kind.name, **kind.example,
                  "tables": [{"name": "orders", "primary_key": ["id"]}]}
        scaffold_component(request, {"lake": params.lake, "merge": {"engine": "local"}, "sources": [source]})


@scaffold_with(DatabusScaffolder)
class DatabusComponent(Component, Resolvable, Model):
    """Change data capture into a Delta lake: per source, capture installed and verified, its change log polled, and
    snapshots merged (assets ``<source>/capture``, ``<source>/changelog``, ``<source>/<table>``), with their checks,
    sync, bootstrap, rebuild, refresh, reconcile and upkeep jobs, and schedules (off until turned on)."""

    config_file: str | None = Field(
        default=None, description="a databus config file (relative: to defs.yaml's folder), instead of the "
                                  "attributes below")
    lake: str | None = Field(default=None, description="the lake: a folder (relative: to defs.yaml's folder) or an "
                                                       "s3://, gs://, az:// URI")
    storage_options: dict[str, str] = Field(default_factory=dict,
                                            description="an object-store lake's options; secrets as ${ENV_VAR}")
    sources: list[dict[str, Any]] = Field(default_factory=list, description="the sources, as sources[] of the "
                                                                            "config file")
    logical_tables: list[dict[str, Any]] = Field(default_factory=list)
    spark: dict[str, Any] = Field(default_factory=dict)
    merge: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_way(self) -> DatabusComponent:
        inline = self.lake is not None or bool(self.sources)
        if (self.config_file is None) == (not inline):
            raise ValueError("give either config_file (a databus config file) or the config itself (lake and "
                             "sources, as the config file's), not both and not neither")
        return self

    def document(self) -> dict[str, Any]:
        """The attributes as a config file's document (those given)."""
        given = self.model_dump(exclude={"config_file"}, exclude_defaults=True)
        return {key: value for key, value in given.items() if value is not None}

    def databus_config(self, folder: Path) -> tuple[DatabusConfig, DatabusResource]:
        """The config, checked as ``databus validate`` checks a file's (a ``ConfigError`` names field and fix), and
        the resource that gives it to the runs' steps."""
        if self.config_file is not None:
            path = (folder / self.config_file).resolve()
            return load_config(path), DatabusResource.for_file(path)
        document = self.document()
        return parse_config(document, base=folder), DatabusResource.for_document(document, folder)

    def build_defs(self, context: ComponentLoadContext) -> dg.Definitions:
        config, resource = self.databus_config(Path(context.path))
        return build_definitions(config, resource, executor=False)
