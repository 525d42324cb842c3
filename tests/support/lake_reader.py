"""One reader of the lake, run as a process of its own by tests/integration/common/test_lake_readers.py:
``python -m tests.support.lake_reader TOOL REQUEST`` reads each table the request (JSON) names the way
docs/consumers.md, "Reading the lake", shows for TOOL, and prints, as one JSON document, each read's rows and its
columns' types as TOOL names them. It ends as a user's script ends: by returning, with nothing done for it at exit.

Values are printed tagged, so the test compares them with the source's own without losing their type: ``D:`` a
decimal, ``T:`` a datetime (``+00:00`` when it carries a time zone), ``d:`` a date, ``B:`` bytes in hex."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import sys
from typing import Any


def tagged(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return f"D:{value}"
    if isinstance(value, dt.datetime):
        return f"T:{value.isoformat()}"
    if isinstance(value, dt.date):
        return f"d:{value.isoformat()}"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"B:{bytes(value).hex()}"
    return value


def where_sql(read: dict[str, Any]) -> str:
    """The read's condition as SQL (DuckDB, Spark): a snapshot's current rows, a history's rows as of an SCN."""
    if read.get("as_of") is not None:
        return f"__start_scn <= {int(read['as_of'])} AND (__end_scn IS NULL OR __end_scn > {int(read['as_of'])})"
    return "__op <> 'd'" if read.get("live") else "true"


def rows_of(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: tagged(v) for k, v in r.items()} for r in records]


def deltalake_reads(request: dict[str, Any]) -> dict[str, Any]:
    import pyarrow as pa
    import pyarrow.fs as pafs
    from deltalake import DeltaTable

    def native(path: str) -> pafs.FileSystem:  # docs/consumers.md: never deltalake's default file system
        return pafs.SubTreeFileSystem(path, pafs.LocalFileSystem())

    out: dict[str, Any] = {}
    for name, read in request["reads"].items():
        table = DeltaTable(read["path"], version=read.get("version"))
        if read.get("feed_from") is not None:
            data = pa.table(table.load_cdf(starting_version=read["feed_from"]).read_all())
        else:
            data = table.to_pyarrow_table(filesystem=native(read["path"]), filters=arrow_filter(read))
        out[name] = {"rows": rows_of(data.to_pylist()), "types": {f.name: str(f.type) for f in data.schema}}
        if read.get("pandas"):
            frame = table.to_pandas(filesystem=native(read["path"]), filters=arrow_filter(read))
            records = [{k: (v.to_pydatetime() if hasattr(v, "to_pydatetime") else v) for k, v in r.items()}
                       for r in frame.to_dict("records")]
            out[f"{name}/pandas"] = {"rows": rows_of(records), "types": {k: str(t) for k, t in frame.dtypes.items()}}
    return out


def arrow_filter(read: dict[str, Any]) -> Any:
    import pyarrow.dataset as ds

    if read.get("as_of") is not None:
        scn = int(read["as_of"])
        return (ds.field("__start_scn") <= scn) & (ds.field("__end_scn").is_null() | (ds.field("__end_scn") > scn))
    return ds.field("__op") != "d" if read.get("live") else None


def duckdb_reads(request: dict[str, Any]) -> dict[str, Any]:
    import duckdb
    import duckdb_extensions

    con = duckdb.connect()
    duckdb_extensions.import_extension("delta", con=con)  # the extension from its PyPI wheel: no download
    con.load_extension("delta")
    con.execute("SET TimeZone = 'UTC'")
    out: dict[str, Any] = {}
    for name, read in request["reads"].items():
        result = con.execute(f"SELECT * FROM delta_scan(?) WHERE {where_sql(read)}", [read["path"]])
        columns = [d[0] for d in result.description]
        types = {d[0]: str(d[1]) for d in result.description}
        out[name] = {"rows": rows_of([dict(zip(columns, row, strict=True)) for row in result.fetchall()]),
                     "types": types}
    return out


def polars_reads(request: dict[str, Any]) -> dict[str, Any]:
    import polars as pl

    out: dict[str, Any] = {}
    for name, read in request["reads"].items():
        frame = pl.scan_delta(read["path"], version=read.get("version"))
        if read.get("as_of") is not None:
            scn = int(read["as_of"])
            frame = frame.filter((pl.col("__start_scn") <= scn)
                                 & (pl.col("__end_scn").is_null() | (pl.col("__end_scn") > scn)))
        elif read.get("live"):
            frame = frame.filter(pl.col("__op") != "d")
        data = frame.collect()
        out[name] = {"rows": rows_of(data.to_dicts()), "types": {k: str(t) for k, t in data.schema.items()}}
    return out


def spark_reads(request: dict[str, Any]) -> dict[str, Any]:
    from pyspark.sql import SparkSession

    from dagster_databus.dataplane.delta import DeltaFolder
    from dagster_databus.spark.changefeed import read_change_feed
    from dagster_databus.spark.lakeread import read_table
    from dagster_databus.spark.runtime import SparkRuntime

    session = (SparkSession.builder.master("local[1]").config("spark.sql.session.timeZone", "UTC")
               .config("spark.ui.enabled", "false").getOrCreate())
    spark = SparkRuntime.of(session)
    out: dict[str, Any] = {}
    try:
        for name, read in request["reads"].items():
            folder = DeltaFolder(request["lake"], *read["key"])
            if read.get("feed_from") is not None:
                frame = read_change_feed(spark, folder, read["feed_from"])
            else:
                frame = read_table(spark, folder, read.get("version"))
            frame = frame.where(where_sql(read))
            # A Spark timestamp comes back as the session's local time, naive: the session's zone is UTC.
            zoned = {f.name for f in frame.schema.fields if f.dataType.simpleString() == "timestamp"}
            records = [{k: (v.replace(tzinfo=dt.UTC) if k in zoned and v is not None else v)
                        for k, v in row.asDict().items()} for row in frame.collect()]
            out[name] = {"rows": rows_of(records),
                         "types": {f.name: f.dataType.simpleString() for f in frame.schema.fields}}
    finally:
        session.stop()
    return out


READERS = {"deltalake": deltalake_reads, "duckdb": duckdb_reads, "polars": polars_reads, "spark": spark_reads}


def main() -> None:
    tool, request = sys.argv[1], json.loads(sys.argv[2])
    print(json.dumps(READERS[tool](request)))


if __name__ == "__main__":
    main()
