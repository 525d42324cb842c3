"""The lake as a pyarrow file system of pyarrow's own (C++) implementation, which every Arrow read of a Delta
table's files goes through (``dataplane.delta.DeltaFolder.dataset``).

Not delta-rs's default: without a ``filesystem``, ``DeltaTable.to_pyarrow_dataset`` (and ``to_pyarrow_table``,
``to_pandas``) reads through a Python-implemented one (``pyarrow.fs.PyFileSystem`` over delta-rs's handler).
Arrow frees the last reader of such a file on one of its worker threads, after the read has returned; when
that happens while the interpreter shuts down, the thread asks for the GIL, Python ends it with
``pthread_exit``, and the unwinding through a C++ destructor aborts the whole process (``terminate called
without an active exception``, exit 134) after it did its work. Every deltalake 1.4-1.6 and pyarrow 18-26
tried here does it, in from 1 run in 10 to every run (docs/upstream/arrow-exit-abort.md). A native file
system has no Python object to free. (Local and S3 lakes always get one; a GCS or Azure lake whose credentials
are in its storage options still reads through delta-rs's.)
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from dagster_databus.storage.location import LakeLocation


def arrow_filesystem(location: LakeLocation, key: str) -> pafs.FileSystem | None:
    """The lake's folder ``key`` (a table's root, relative to the lake's) as the root of a native file system; None
    for a GCS or Azure lake whose storage options hold its credentials (see below)."""
    if location.is_local:
        assert location.path is not None
        return pafs.SubTreeFileSystem(str(location.path / key), pafs.LocalFileSystem())
    if location.scheme == "s3":
        root = "/".join(p for p in (location.bucket, location.prefix, key) if p)
        return pafs.SubTreeFileSystem(root, _s3(location.options))
    if location.options:
        # pyarrow's GCS and Azure clients do not take delta-rs's option names (a service account file, a SAS
        # key...): delta-rs's own file system reads with them, at the risk above. Untested here: no such store.
        return None
    # Credentials from the environment, which pyarrow's clients read as delta-rs's do.
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
