"""A Spark Connect server for the tests: one ``local[2]`` server from the pyspark wheel on a free loopback port,
started once per test session (``conftest.spark_connect_server``), its log in a temp folder.

Its Python workers run this interpreter with ``dagster_databus`` hidden from it (an import hook refuses the
package unless it comes from a zip on ``sys.path``), as on a server where only the dependencies are installed:
the tests' Connect sessions ship the package (``spark.ship_package``), so they prove it reaches the server.
"""

from __future__ import annotations

import sys
from pathlib import Path

from dagster_databus.spark.connect_server import ConnectServer

# Imported by the workers' Python at start (sitecustomize): the shipped zip, and nothing else, may provide
# the package.
_HIDE = '''
import importlib.machinery
import sys


class _ShippedOnly:
    """Finds dagster_databus only in a zip on sys.path (a Spark Connect session's shipped artifact)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "dagster_databus":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, [p for p in sys.path if p.endswith(".zip")])
        if spec is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return spec


sys.meta_path.insert(0, _ShippedOnly)
'''


def python_without_package(folder: Path) -> Path:
    """A launcher of this interpreter whose ``import dagster_databus`` finds only a shipped zip."""
    site = folder / "site"
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(_HIDE)
    launcher = folder / "python"
    launcher.write_text(f'#!/bin/sh\nPYTHONPATH="{site}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" "$@"\n')
    launcher.chmod(0o755)
    return launcher


def start_connect_server() -> ConnectServer:
    """Start the tests' server; ``SparkUnavailableError`` with the end of its log when it does not come up."""
    server = ConnectServer(master="local[2]",
                           # Progress reaches clients every 2 s by default; the progress test waits less.
                           conf={"spark.connect.progress.reportInterval": "200ms", "spark.driver.memory": "1g"})
    server.python = str(python_without_package(server.log_dir / "python"))  # removed with the logs
    return server.start()
