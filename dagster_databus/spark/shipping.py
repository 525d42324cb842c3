"""This package shipped to a Spark Connect server whose Python lacks it (``spark.ship_package``): zipped once
per process with its SQL files, and added to a session's Python path as an artifact."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql.connect.session import SparkSession as ConnectSession

_zip_lock = threading.Lock()
_zip: Path | None = None


def ship_package(session: ConnectSession) -> None:
    """Add this package (and its ``sql/`` files) to the Connect session's Python path on the server, for a
    server whose Python lacks it; its dependencies must be installed there (docs/deployment.md)."""
    session.addArtifacts(str(package_zip()), pyfile=True)


def package_digest() -> str:
    """The shipped package's content hash: runs of another version of it get a session of their own (a
    session's Python artifacts cannot be replaced)."""
    return hashlib.sha256(package_zip().read_bytes()).hexdigest()[:16]


def package_zip() -> Path:
    """``dagster_databus.zip``: the package's files with its SQL as ``dagster_databus/sql/``, where an installed
    wheel has it too (``sources.sqlfiles`` reads it there); built once per process."""
    import tempfile
    import zipfile

    import dagster_databus
    from dagster_databus.sources.sqlfiles import sql_root

    global _zip
    with _zip_lock:
        if _zip is None or not _zip.exists():
            package = Path(dagster_databus.__file__).resolve().parent
            sql = Path(str(sql_root()))
            roots = [(package, package.name)] + ([] if sql.parent == package else [(sql, f"{package.name}/sql")])
            out = Path(tempfile.mkdtemp(prefix="databus-ship-")) / "dagster_databus.zip"
            with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
                for root, prefix in roots:
                    for path in sorted(root.rglob("*")):
                        if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".nbi",
                                                                                                       ".nbc"):
                            archive.write(path, f"{prefix}/{path.relative_to(root).as_posix()}")
            _zip = out
        return _zip
