"""Every Arrow read of the lake's Delta tables goes through a native pyarrow file system (``storage.arrowfs``):
delta-rs's default one can abort the process at exit. Checked on the package's source, so a read added later that
calls delta-rs's readers without one fails here before any user's run does; and the file systems themselves."""

from __future__ import annotations

import ast
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from dagster_databus.storage.arrowfs import _s3, arrow_filesystem
from dagster_databus.storage.location import parse_lake
from tests.support.paths import REPO

READERS = {"to_pyarrow_table", "to_pyarrow_dataset", "to_pandas"}  # delta-rs's, pyarrow's by file system


def unsafe_reads(root: Path) -> list[str]:
    """Calls of delta-rs's Arrow readers without a ``filesystem``, as ``file:line``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in READERS
                    and not any(k.arg == "filesystem" for k in node.keywords)):
                found.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return found


def test_the_package_reads_delta_tables_only_through_a_native_file_system() -> None:
    assert unsafe_reads(REPO / "dagster_databus") == [], "read through DeltaFolder.dataset (storage/arrowfs.py)"


def test_the_check_finds_a_read_without_a_file_system(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text("def f(t):\n    return t.to_pyarrow_table()\n")
    assert unsafe_reads(tmp_path / "pkg") == ["pkg/m.py:2"]


def test_a_local_lake_folder_is_the_root_of_a_local_file_system(tmp_path: Path) -> None:
    (tmp_path / "snapshot" / "s" / "t").mkdir(parents=True)
    pq.write_table(pa.table({"a": [1]}), tmp_path / "snapshot" / "s" / "t" / "part.parquet")
    fs = arrow_filesystem(parse_lake(str(tmp_path)), "snapshot/s/t")
    assert isinstance(fs, pafs.SubTreeFileSystem) and isinstance(fs.base_fs, pafs.LocalFileSystem)
    assert pq.read_table("part.parquet", filesystem=fs).to_pylist() == [{"a": 1}]


@pytest.mark.parametrize(("endpoint", "override", "scheme"), [
    ("http://127.0.0.1:9000", "127.0.0.1:9000", "http"),
    ("https://minio.example.com/", "minio.example.com", "https"),
    ("minio.example.com:9000", "minio.example.com:9000", "https"),
])
def test_s3_storage_options_become_pyarrows_own_settings(endpoint: str, override: str, scheme: str) -> None:
    fs = _s3({"AWS_ENDPOINT_URL": endpoint, "aws_region": "eu-west-1", "AWS_ACCESS_KEY_ID": "k",
              "AWS_SECRET_ACCESS_KEY": "s"})
    settings = fs.__reduce__()[1][0]  # what pyarrow pickles it with: its own settings
    assert (settings["endpoint_override"], settings["scheme"], settings["region"]) == (override, scheme, "eu-west-1")
    assert (settings["access_key"], settings["secret_key"]) == ("k", "s")


def test_a_gcs_lake_with_credentials_in_its_options_keeps_delta_rss_file_system() -> None:
    """pyarrow's GCS client cannot take delta-rs's option names: a native one would read without the credentials."""
    location = parse_lake("gs://bucket/lake", options={"GOOGLE_SERVICE_ACCOUNT": "/etc/key.json"})
    assert arrow_filesystem(location, "snapshot/s/t") is None
