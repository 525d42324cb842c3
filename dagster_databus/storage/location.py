"""The ``lake:`` setting: a plain path, ``file://`` or an object-store URI, and its storage options."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from dagster_databus.errors import LakeLocationError

# URI scheme → the store it names.
SCHEMES = {"file": "file", "s3": "s3", "s3a": "s3", "gs": "gs", "gcs": "gs", "az": "az", "azure": "az",
           "abfs": "az", "abfss": "az"}
# Option names that hold secrets: they may only name an environment variable, never hold the value.
_SECRET = re.compile(r"SECRET|PASSWORD|TOKEN|SAS|KEY(?!_ID)|CREDENTIAL|PRIVATE", re.IGNORECASE)
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class LakeLocation:
    """Where the lake is: ``path`` for a local folder; ``bucket`` and ``prefix`` in an object store."""

    scheme: str  # file, s3, gs or az
    path: Path | None = None
    bucket: str = ""
    prefix: str = ""  # key prefix inside the bucket: no leading or trailing slash
    options: Mapping[str, str] = field(default_factory=dict, repr=False)  # resolved; may hold secrets
    # An abfs(s) URI's ``container@account.dfs.core.windows.net``: the storage account is named there,
    # so the URI is kept as written for delta-rs, delta-spark and the object store client.
    authority: str = ""

    @property
    def is_local(self) -> bool:
        return self.scheme == "file"

    @property
    def uri(self) -> str:
        if self.path is not None:
            return self.path.as_uri()
        if self.authority:
            return f"abfss://{self.authority}/{self.prefix}".rstrip("/")
        return f"{self.scheme}://{self.bucket}/{self.prefix}".rstrip("/")

    def child(self, *parts: str) -> str:
        """The URI of a file or folder inside the lake (what delta-rs and Spark are given)."""
        return "/".join([self.uri, *parts])

    def described(self) -> str:
        """The location with its options' names, never their values (for logs and messages)."""
        names = ", ".join(sorted(self.options))
        return self.uri + (f" (storage options: {names})" if names else "")


def parse_lake(text: str, base: Path | None = None, options: Mapping[str, str] | None = None,
               environ: Mapping[str, str] | None = None) -> LakeLocation:
    """``text`` as a lake location; relative paths are taken from ``base``; ``options`` resolved."""
    text = text.strip()
    if not text:
        raise LakeLocationError("lake is empty: give a folder, or a URI such as s3://bucket/prefix")
    resolved = resolve_options(options or {}, os.environ if environ is None else environ)
    match = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://", text)
    if not match:
        path = Path(text).expanduser()
        return LakeLocation("file", path=(base / path if base is not None and not path.is_absolute() else path),
                            options=resolved)
    scheme = SCHEMES.get(match.group(1).lower())
    if scheme is None:
        raise LakeLocationError(
            f"lake {text!r} uses the scheme {match.group(1)!r}, which has no store here: use a folder, file://, "
            "s3://, gs://, az:// or abfss://")
    parts = urlsplit(text)
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise LakeLocationError(f"lake {text!r}: a file:// URI names a local folder (file:///path)")
        return LakeLocation("file", path=Path(parts.path), options=resolved)
    azure_account = match.group(1).lower() in ("abfs", "abfss") and "@" in parts.netloc
    bucket = parts.netloc.split("@")[0] if azure_account else parts.netloc
    if not bucket:
        raise LakeLocationError(f"lake {text!r} names no bucket or container: {scheme}://<bucket>/<prefix>")
    return LakeLocation(scheme, bucket=bucket, prefix=parts.path.strip("/"), options=resolved,
                        authority=parts.netloc if azure_account else "")


def resolve_options(options: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """Storage options with ``${VAR}`` references replaced from ``environ``. Secrets must be references:
    a literal secret in a config file would end up in version control and in Dagster's run config."""
    out = {}
    for name, value in options.items():
        value = str(value)
        refs = _ENV_REF.findall(value)
        if _SECRET.search(name) and not (refs and _ENV_REF.fullmatch(value)):
            raise LakeLocationError(
                f"storage option {name} holds a secret written into the config: put it in an environment "
                f"variable and write {name}: ${{VARIABLE}} (or leave it out: the store's own variables, such "
                "as AWS_SECRET_ACCESS_KEY, are read from the environment)")
        missing = [ref for ref in refs if ref not in environ]
        if missing:
            raise LakeLocationError(f"storage option {name} names environment variable(s) {', '.join(missing)}, "
                                    "which are not set: set them for every process that reads the lake")
        out[name] = _ENV_REF.sub(lambda m: environ[m.group(1)], value)
    return out
