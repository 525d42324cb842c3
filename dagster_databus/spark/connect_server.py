"""A Spark Connect server started from the pyspark wheel (``spark-submit --class ...SparkConnectServer``), for
the tests, ``make dev CONNECT=1`` and the benchmarks: every run with ``spark.remote`` pointing at it is a thin
client of its one long-running JVM. A deployment runs its own server, or a cluster's (docs/deployment.md).

    python -m dagster_databus.spark.connect_server run [--port N] [--config demo.yaml --out connect.yaml] -- CMD...

starts a server on a free loopback port, writes a copy of ``--config`` whose ``spark.remote`` names it, runs
``CMD`` with ``DATABUS_CONFIG`` (and ``DATABUS_SPARK_REMOTE``) set to them, and stops the server when ``CMD``
ends (Ctrl-C included).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from dagster_databus.errors import SparkUnavailableError

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
REMOTE_ENV = "DATABUS_SPARK_REMOTE"  # set by ``run`` for the command it runs
STOP_GRACE_S = 30  # how long ``run`` gives its command to stop before killing it


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def accepts(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """Whether something listens on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


class ConnectServer:
    """One Spark Connect server process (its own process group, so stopping it takes its Python workers
    too) on ``host:port``, running ``master`` (``local[N]``, or a cluster's URL). Its Python workers run
    ``python`` (default: this interpreter, which has this package and its dependencies). Logs go to
    ``log_dir`` (a temp folder by default, removed on ``stop`` unless the server failed)."""

    def __init__(self, port: int | None = None, master: str = "local[2]", host: str = "127.0.0.1",
                 conf: Mapping[str, str] | None = None, python: str | None = None, log_dir: Path | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        self.host, self.port, self.master = host, port or free_port(), master
        self.conf = dict(conf or {})
        self.python = python or sys.executable
        self._own_logs = log_dir is None
        self.log_dir = log_dir or Path(tempfile.mkdtemp(prefix="databus-connect-"))
        self.extra_env = dict(env or {})
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"sc://{self.host}:{self.port}"

    @property
    def log(self) -> Path:
        return self.log_dir / "connect-server.log"

    def command(self) -> list[str]:
        conf = {"spark.connect.grpc.binding.address": self.host, "spark.connect.grpc.binding.port": str(self.port),
                "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                "spark.sql.session.timeZone": "UTC", "spark.driver.host": self.host,
                "spark.driver.bindAddress": self.host, **self.conf}
        args = [str(spark_home() / "bin" / "spark-submit"), "--class", SERVER_CLASS, "--master", self.master,
                "--name", "databus-connect-server"]
        for key, value in conf.items():
            args += ["--conf", f"{key}={value}"]
        return [*args, "spark-internal"]

    def start(self, timeout_s: float = 120) -> ConnectServer:
        """Start the server and wait until it accepts connections; ``SparkUnavailableError`` (with the log's
        tail) if it exits or does not listen within ``timeout_s``."""
        if accepts(self.host, self.port, 0.2):
            self.stop()
            raise SparkUnavailableError(f"port {self.port} on {self.host} is taken: a Spark Connect server cannot "
                                        "listen there", "choose another port (or none: a free one is picked)")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        # The server's Python workers (data sources, mapInArrow) must run an interpreter with this package
        # and its dependencies; SPARK_LOCAL_IP keeps the JVM's own endpoints on loopback.
        env = {**os.environ, "SPARK_HOME": str(spark_home()), "PYSPARK_PYTHON": self.python,
               "SPARK_LOCAL_IP": self.host, "SPARK_LOG_DIR": str(self.log_dir), **self.extra_env}
        env.pop("SPARK_REMOTE", None)  # would make the server's own PySpark a client
        env.pop("SPARK_CONNECT_MODE_ENABLED", None)
        with open(self.log, "ab") as out:
            # A session of its own: Ctrl-C in the terminal reaches the client, and stop() the whole group.
            self.process = subprocess.Popen(self.command(), env=env, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True,
                                            cwd=self.log_dir)
        deadline = time.monotonic() + timeout_s
        while not accepts(self.host, self.port, 0.5):
            if self.process.poll() is not None or time.monotonic() > deadline:
                why = (f"exited with status {self.process.returncode}" if self.process.poll() is not None
                       else f"did not listen within {timeout_s:.0f} s")
                self.stop(keep_logs=True)
                raise SparkUnavailableError(
                    f"the Spark Connect server on {self.url} {why}; the end of its log ({self.log}):\n"
                    f"{self.tail()}",
                    "check that Java 17+ is on PATH and the port is free; the log above names the cause")
            time.sleep(0.2)
        return self

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def stop(self, keep_logs: bool = False) -> None:
        """Stop the server and its Python workers (SIGTERM, then SIGKILL after 20 s)."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        if self._own_logs and not keep_logs:
            shutil.rmtree(self.log_dir, ignore_errors=True)

    def __enter__(self) -> ConnectServer:
        return self.start() if self.process is None else self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def remote_config(base: Path, url: str) -> dict[str, Any]:
    """The config file ``base`` with ``spark.remote: url`` (and no ``spark.master``), its relative paths made
    absolute so that the copy can live in another folder."""
    import yaml

    raw = yaml.safe_load(base.read_text()) or {}
    folder = base.resolve().parent

    def absolute(value: Any) -> Any:
        if not isinstance(value, str) or "://" in value:
            return value
        path = Path(value).expanduser()
        return str(path if path.is_absolute() else (folder / path).resolve())

    if "lake" in raw:
        raw["lake"] = absolute(raw["lake"])
    for source in raw.get("sources") or []:
        if isinstance(source, dict) and "path" in source:
            source["path"] = absolute(source["path"])
    merge = raw.get("merge") or {}
    if "spill_dir" in merge:
        merge["spill_dir"] = absolute(merge["spill_dir"])
    spark = {k: v for k, v in (raw.get("spark") or {}).items() if k not in ("master", "delta_jars")}
    raw["spark"] = {**spark, "remote": url}
    return raw


def _run(args: argparse.Namespace) -> int:
    import yaml

    command: Sequence[str] = args.command[1:] if args.command[:1] == ["--"] else args.command
    child: subprocess.Popen[bytes] | None = None
    deadline: float | None = None  # when a command asked to stop is killed

    def stop_child() -> None:
        """Ask the command's process group to stop as Ctrl-C does (``dagster dev`` shuts its processes down
        on SIGINT, not on SIGTERM); it is killed if still running ``STOP_GRACE_S`` later."""
        nonlocal deadline
        if child is not None and child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGINT)
            deadline = deadline or time.monotonic() + STOP_GRACE_S

    def on_sigterm(*_: object) -> None:
        """A supervisor stopping this: stop the command, then the server (below)."""
        if child is not None and child.poll() is None:
            stop_child()
        else:
            raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_sigterm)
    server = ConnectServer(port=args.port, master=args.master)
    print(f"starting a Spark Connect server on {server.url} (log: {server.log})", flush=True)
    server.start()
    env = {**os.environ, REMOTE_ENV: server.url}
    try:
        if args.config is not None:
            out = Path(args.out)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(f"# Written by dagster_databus.spark.connect_server: {args.config} with spark.remote set to "
                           "the server it started.\n" + yaml.safe_dump(remote_config(Path(args.config), server.url),
                                                                      sort_keys=False))
            env["DATABUS_CONFIG"] = str(out.resolve())
            print(f"config for its runs: {out}", flush=True)
        if not command:
            print("serving; Ctrl-C stops it", flush=True)
            while server.process is not None and server.process.poll() is None:
                time.sleep(1)
            return 1
        # A process group of its own, so that stopping it reaches every process it started; Ctrl-C in the
        # terminal reaches this process, which passes it on.
        child = subprocess.Popen(list(command), env=env, process_group=0)
        while True:
            try:
                return child.wait(timeout=1)
            except subprocess.TimeoutExpired:
                if deadline is not None and time.monotonic() > deadline:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(child.pid, signal.SIGKILL)
            except KeyboardInterrupt:
                stop_child()
    except KeyboardInterrupt:
        return 130
    finally:
        if child is not None and child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        print("stopping the Spark Connect server", flush=True)
        server.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dagster_databus.spark.connect_server",
                                     description="Run a command against a Spark Connect server started for it.")
    sub = parser.add_subparsers(dest="action", required=True)
    run = sub.add_parser("run", help="start a server, run a command (or serve until Ctrl-C), stop the server")
    run.add_argument("--port", type=int, default=None, help="default: a free port")
    run.add_argument("--master", default="local[2]", help="the server's Spark master (default: local[2])")
    run.add_argument("--config", default=None, help="a databus config to copy with spark.remote set")
    run.add_argument("--out", default=".demo/connect.yaml", help="where to write that copy")
    run.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    return _run(args)


if __name__ == "__main__":
    sys.exit(main())
