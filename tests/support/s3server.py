"""A real S3-compatible server for the tests: moto's standalone server (``moto[server]`` from PyPI),
started on a free loopback port. It implements conditional puts (``If-None-Match: *``), which the
lake's commit relies on, and serves delta-rs as well as obstore."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
import uuid

from dagster_databus.spark.connect_server import free_port
from dagster_databus.storage.lake import Lake


class S3Server:
    SECRET = "test"  # moto accepts any credentials
    # The secret as a deployment gives it: an environment variable (tests.support.fixtures sets it for
    # every process from the start, Spark's Python workers included), named in the options by reference.
    SECRET_ENV = "S3_TEST_SECRET"
    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=1).close()
                break
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.close()
                    raise RuntimeError(f"the S3 test server (moto) did not start on port {self.port}") from None
                time.sleep(0.1)

    @property
    def options(self) -> dict[str, str]:
        """Storage options for delta-rs and obstore (moto accepts any credentials)."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": self.SECRET,
                "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true", "AWS_CONDITIONAL_PUT": "etag"}

    @property
    def referenced_options(self) -> dict[str, str]:
        """``options`` as a config writes them: the secret only as a reference to ``SECRET_ENV``."""
        return {**self.options, "AWS_SECRET_ACCESS_KEY": "${" + self.SECRET_ENV + "}"}

    def bucket(self) -> str:
        """A new, empty bucket."""
        import boto3

        name = f"lake-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id="test", aws_secret_access_key="test",
                     region_name="us-east-1").create_bucket(Bucket=name)
        return name

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def s3_lake(server: S3Server, prefix: str = "lake") -> Lake:
    """A lake in a fresh bucket of the test server; its secret is named by reference, resolved from the
    environment by each process (and Spark task) that opens it."""
    return Lake.parse(f"s3://{server.bucket()}/{prefix}", options=server.referenced_options)
