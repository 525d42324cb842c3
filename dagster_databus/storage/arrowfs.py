"""The lake as a pyarrow file system of pyarrow's own (C++) implementation, which every Arrow read of a Delta
table's files goes through (``dataplane.delta.arrow_dataset``).

Not delta-rs's default: without a ``filesystem``, ``DeltaTable.to_pyarrow_dataset`` (and ``to_pyarrow_table``,
``to_pandas``) reads through a Python-implemented one (``pyarrow.fs.PyFileSystem`` over delta-rs's handler).
Arrow frees the last reader of such a file on one of its worker threads, after the read has returned; when
that happens while the interpreter shuts down, the thread asks for the GIL, Python ends it with
``pthread_exit``, and the unwinding through a C++ destructor aborts the whole process (``terminate called
without an active exception``, exit 134) after it did its work. Every deltalake 1.4-1.6 and pyarrow 18-26
tried here does it, at rates from 1 in 7 to 1 in 1 (docs/consumers.md, "Reading the lake"). A native file
system has no Python object to free.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from dagster_databus.storage.location import LakeLocation


def arrow_filesystem(location: LakeLocation, key: str) -> pafs.FileSystem:
    """The lake's folder ``key`` (a table's root, relative to the lake's) as the root of a native file system."""
    if location.is_local:
        assert location.path is not None
        return pafs.SubTreeFileSystem(str(location.path / key), pafs.LocalFileSystem())
    if location.scheme == "s3":
        root = "/".join(p for p in (location.bucket, location.prefix, key) if p)
        return pafs.SubTreeFileSystem(root, _s3(location.options))
    # GCS and Azure: pyarrow's own clients, credentials from their environments, as delta-rs's and obstore's
    # take them where the storage options leave them out.
    filesystem, root = pafs.FileSystem.from_uri(location.child(key))
    return pafs.SubTreeFileSystem(root, filesystem)


def _s3(options: Mapping[str, str]) -> pafs.S3FileSystem:
    """pyarrow's S3 client from the storage options delta-rs and obstore read (``AWS_*``); what they leave out
    comes from the AWS environment, as it does for them."""
    named = {k.upper(): v for k, v in options.items()}
    kwargs: dict[str, object] = {}
    if "AWS_ACCESS_KEY_ID" in named:
        kwargs.update(access_key=named["AWS_ACCESS_KEY_ID"], secret_key=named.get("AWS_SECRET_ACCESS_KEY"),
                      session_token=named.get("AWS_SESSION_TOKEN"))
    region = named.get("AWS_REGION") or named.get("AWS_DEFAULT_REGION")
    if region:
        kwargs["region"] = region
    endpoint = named.get("AWS_ENDPOINT_URL") or named.get("AWS_ENDPOINT")
    if endpoint:
        parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        kwargs.update(endpoint_override=parts.netloc + parts.path.rstrip("/"), scheme=parts.scheme)
    if named.get("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "").lower() == "true":
        kwargs["force_virtual_addressing"] = True
    return pafs.S3FileSystem(**kwargs)
