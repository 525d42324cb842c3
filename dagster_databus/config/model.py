"""The whole config: the lake, its sources, logical tables, Spark and the merge."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from dagster_databus.config.fields import Strict, UpkeepConfig, plain_name
from dagster_databus.config.sources import SourceConfig
from dagster_databus.errors import ConfigError
from dagster_databus.storage.lake import Lake


class SparkConfig(Strict):
    master: str = "local[2]"
    # A Spark Connect server (sc://host:port[/;param=value...]): each run is a thin client of it instead of
    # starting its own Spark driver. Excludes master (the server has its own) and delta_jars.
    remote: str | None = None
    # With remote: add this package to the session's Python path on the server (for a server whose Python
    # lacks it; its dependencies must be installed there).
    ship_package: bool = False
    # Folder holding delta-spark's jars (delta-spark_*.jar, delta-storage-*.jar), put on the session's
    # classpath (DATABUS_DELTA_JARS names one too): for merge.engine delta-spark (or auto).
    delta_jars: Path | None = None
    conf: dict[str, str] = Field(default_factory=dict)

    @field_validator("remote")
    @classmethod
    def _remote_url(cls, value: str | None) -> str | None:
        if value is not None and not (value.startswith("sc://") and len(value) > len("sc://")):
            raise ValueError(f"{value!r} is not a Spark Connect URL; write sc://host:port (15002 when left out), "
                             "for example sc://spark-connect.internal:15002")
        return value

    @model_validator(mode="after")
    def _remote_or_master(self) -> SparkConfig:
        if self.remote is None:
            if self.ship_package:
                raise ValueError("ship_package applies only with spark.remote (a Spark Connect server); remove it, "
                                 "or set spark.remote")
            return self
        if "master" in self.model_fields_set:
            raise ValueError(f"both master ({self.master!r}) and remote ({self.remote!r}) are set; a run either "
                             "starts its own Spark driver (master) or is a client of a Spark Connect server "
                             "(remote, whose own master applies): remove one of them")
        if self.delta_jars is not None:
            raise ValueError("delta_jars cannot be used with remote: a Spark Connect server's classpath is fixed "
                             "when it starts; start the server with delta-spark's jars and remove delta_jars")
        return self


MergeEngineName = Literal["spark", "delta-spark", "local", "auto"]


class MergeConfig(Strict):
    """How snapshots are bootstrapped and merged (docs/architecture.md, "Engines").

    ``spark``: Spark tasks read the source and the change log, reduce, and write the Delta data files;
    the driver commits them through delta-rs. ``delta-spark``: Spark's own Delta MERGE (its jars must
    be on the session's classpath). ``local``: one process reads, reduces and MERGEs through delta-rs,
    no Spark (small single-machine setups). ``auto``: delta-spark where its classes load, else spark.
    """

    engine: MergeEngineName = "spark"
    # The newest change per key is reduced in bounded memory: changes beyond this many MiB spill to
    # files in spill_dir (the system temp folder, or each Spark executor's, when unset).
    memory_mb: int = Field(default=256, ge=16)
    spill_dir: Path | None = None
    # Rows per data file the spark engine writes (bootstrap and rewritten files). A merge rewrites
    # every file that holds a changed key whole: smaller files rewrite less per change, larger ones
    # mean fewer files to list and open (docs/performance.md, "File size").
    file_rows: int = Field(default=1_000_000, ge=1)
    # Tables of a source the Spark engines sync at once (each a driver thread that mostly waits on its
    # jobs, which share the cluster); the local engine syncs one at a time, on this machine's cores.
    parallel_tables: int = Field(default=4, ge=1)
    # The spark engine merges in this process, not as a Spark job, when the change log's range and the data
    # files it rewrites come to at most this many MiB: a job's fixed cost (a second over Spark Connect) is then
    # more than its work. The same code runs either way. 0: always a Spark job.
    in_driver_mib: int = Field(default=16, ge=0)

    @property
    def in_driver_bytes(self) -> int:
        return self.in_driver_mib * 2**20


class LogicalPartConfig(Strict):
    """One physical table of a logical table: a configured table of a configured source."""

    source: str
    table: str
    # The part's value in the logical table's shard column when the table has no such column.
    shard: str | None = None

    @property
    def label(self) -> str:
        return self.shard if self.shard is not None else f"{self.source}.{self.table}"


class LogicalTableConfig(Strict):
    """Sharded physical tables merged into one logical snapshot (as Canal's group event sink merges shards).

    The logical key is ``(shard_column, *primary key)``. When the physical tables have a column
    named ``shard_column`` its values are used; otherwise the column is added with each part's
    label, so equal keys on different shards never collide.
    """

    name: str
    parts: tuple[LogicalPartConfig, ...] = Field(min_length=2)
    shard_column: str = "shard"
    upkeep: UpkeepConfig = UpkeepConfig()  # its own upkeep job and schedule (``<name>_logical_upkeep``)

    _check_name = field_validator("name")(lambda cls, v: plain_name(v))
    _check_shard_column = field_validator("shard_column")(lambda cls, v: plain_name(v))


class DatabusConfig(Strict):
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    lake: Lake
    # Credentials and endpoint of an object-store lake; secrets only as ${ENV_VAR} references.
    storage_options: dict[str, str] = {}
    sources: tuple[SourceConfig, ...] = Field(min_length=1)
    logical_tables: tuple[LogicalTableConfig, ...] = ()
    spark: SparkConfig = SparkConfig()
    merge: MergeConfig = MergeConfig()
    path: Path | None = None

    @model_validator(mode="after")
    def _unique_sources(self) -> DatabusConfig:
        names = [s.name.lower() for s in self.sources]
        if len(set(names)) != len(names):
            raise ValueError("two sources share a name; each source needs its own name")
        return self

    @model_validator(mode="after")
    def _logical_parts_exist(self) -> DatabusConfig:
        seen: set[str] = set()
        for i, logical in enumerate(self.logical_tables):
            if logical.name.lower() in seen:
                raise ValueError(f"logical_tables[{i}]: logical table {logical.name!r} is defined twice")
            seen.add(logical.name.lower())
            labels = [p.label for p in logical.parts]
            if len(set(labels)) != len(labels):
                raise ValueError(f"logical_tables[{i}] ({logical.name}): two parts have the same shard label; "
                                 "give each part its own 'shard'")
            for j, part in enumerate(logical.parts):
                source = next((s for s in self.sources if s.name == part.source), None)
                if source is None:
                    raise ValueError(f"logical_tables[{i}].parts[{j}]: no source named {part.source!r}; use one "
                                     f"of: {', '.join(s.name for s in self.sources)}")
                if part.table not in {t.name for t in source.tables}:
                    raise ValueError(f"logical_tables[{i}].parts[{j}]: source {part.source!r} does not capture "
                                     f"table {part.table!r}; add it to sources.{part.source}.tables first")
        return self

    def logical_table(self, name: str) -> LogicalTableConfig:
        for t in self.logical_tables:
            if t.name == name:
                return t
        known = ", ".join(t.name for t in self.logical_tables) or "(none)"
        raise ConfigError("logical_tables", f"no logical table named {name!r}", f"use one of: {known}")

    def source(self, name: str) -> SourceConfig:
        for s in self.sources:
            if s.name == name:
                return s
        known = ", ".join(s.name for s in self.sources)
        raise ConfigError("sources", f"no source named {name!r}", f"use one of: {known}")
