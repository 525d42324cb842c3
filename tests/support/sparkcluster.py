"""A real Spark standalone cluster for tests and benchmarks: a master and workers started from the
pyspark wheel's own ``bin/spark-class`` on free loopback ports, each worker its own process (group)
with its own work folder. Executors the workers launch run this interpreter's Python."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from tests.support.mariadb import free_port


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


class SparkCluster:
    def __init__(self, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        self.root = Path(tempfile.mkdtemp(prefix="databus-spark-"))
        self.port, self.ui_port = free_port(), free_port()
        self.cores, self.memory = cores, memory
        self.env = {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1",
                    "PYSPARK_PYTHON": sys.executable, "SPARK_LOG_DIR": str(self.root),
                    # The REST submission server would take a fixed port (6066) on every cluster.
                    "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"}
        self.master = self._launch("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                   "--port", str(self.port), "--webui-port", str(self.ui_port))
        self.workers: list[subprocess.Popen[bytes] | None] = []
        try:
            self._wait(lambda: self.status() is not None, "the master")
            for _ in range(workers):
                self.start_worker()
        except BaseException:
            self.close()
            raise

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _launch(self, name: str, main: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 - handed to the process
        # A session of its own: killing the group takes the worker's executors and Python workers with it.
        return subprocess.Popen([str(spark_home() / "bin" / "spark-class"), main, *args], env=env or self.env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def start_worker(self) -> int:
        """Start one more worker; returns its index."""
        index = len(self.workers)
        folder = self.root / f"worker{index}"
        folder.mkdir()
        before = self.alive_workers()
        self.workers.append(self._launch(
            f"worker{index}", "org.apache.spark.deploy.worker.Worker", "--cores", str(self.cores), "--memory",
            self.memory, "--work-dir", str(folder), "--webui-port", str(free_port()), self.url,
            env={**self.env, "SPARK_WORKER_DIR": str(folder)}))
        self._wait(lambda: self.alive_workers() > before, f"worker {index}")
        return index

    def kill_worker(self, index: int) -> None:
        """SIGKILL a worker with its executor and Python workers, as a lost machine would go."""
        process = self.workers[index]
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        self.workers[index] = None

    def status(self) -> dict | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as response:
                return json.loads(response.read())
        except (OSError, ValueError):  # not up yet; a UI still starting may answer with an empty page
            return None

    def alive_workers(self) -> int:
        status = self.status() or {}
        return sum(1 for w in status.get("workers", []) if w.get("state") == "ALIVE")

    def _wait(self, ready, what: str, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            if self.master.poll() is not None or time.monotonic() > deadline:
                logs = "\n".join(p.read_text()[-1500:] for p in sorted(self.root.glob("*.log")))
                raise RuntimeError(f"the Spark cluster did not start {what}:\n{logs}")
            time.sleep(0.2)

    def close(self) -> None:
        for index in range(len(self.workers)):
            self.kill_worker(index)
        if self.master.poll() is None:
            os.killpg(self.master.pid, signal.SIGTERM)
            try:
                self.master.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.master.pid, signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)
