"""Readers of the lake's older on-disk forms, in one place: each names the form it reads, which version wrote
it, and when it can go (``OLD_FORMS``, which docs/architecture.md's "Compatibility" section repeats).

A reader here only reads: the newer code moves a form on with its next write (a manifest's next commit, a
consumer's next cursor), or the form stays until the log is restarted. Forms a version no longer reads are
refused with a fix where the newer reader meets them (a format 1 change log: ``log.manifest``). A source
kind's older capture objects are not lake forms: its install converts them in place, and its package lists
them as ``OLD_FORMS`` of this module's ``OldForm`` beside that install."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from dagster_databus.storage.objects import LakeObjects


@dataclass(frozen=True, slots=True)
class OldForm:
    """An on-disk form a newer version still reads."""

    what: str  # the form, as the lake (or the source) holds it
    version: str  # which form it is
    reader: str  # "module:attribute" that reads or converts it
    remove_when: str  # the condition under which the reader can be deleted


OLD_FORMS = (
    OldForm("<lake>/log/<source>/manifest.json + checkpoint.json (one manifest, replaced in place)",
            "manifest version 0 (before versioned manifests)", "dagster_databus.log.compat:manifest_v0",
            "every deployed log has committed once since (its manifest/ folder exists): the first commit "
            "writes version 1"),
    OldForm("<lake>/log/<source>/ddl.json (every DDL record in one document)",
            "DDL log before one object per statement", "dagster_databus.log.compat:ddl_records_v0",
            "no deployed log holds ddl.json: a restart (databus bootstrap) moves the old log to <lake>/trash/"),
    OldForm("<lake>/consumers/<source>/<client>.json (one cursor document, replaced in place)",
            "consumer cursor version 0 (before versioned cursors)", "dagster_databus.log.compat:cursor_v0_key",
            "every deployed consumer has committed a cursor once since: version 1 is written beside it and the "
            "old one deleted with the versions kept behind"),
)


# A version 0 log's two documents, under the log's folder.
MANIFEST_V0 = "manifest.json"
CHECKPOINT_V0 = "checkpoint.json"


def manifest_v0(objects: LakeObjects, key: str) -> Any:
    """A version 0 manifest under ``key`` (the log's folder) with its checkpoint folded in; None where there is
    none."""
    legacy = objects.read(key + MANIFEST_V0)
    if legacy is None:
        return None
    doc = json.loads(legacy)
    checkpoint = objects.read(key + CHECKPOINT_V0)
    if isinstance(doc, dict) and checkpoint is not None:
        doc["checkpoint"] = json.loads(checkpoint)
    return doc


def has_manifest_v0(objects: LakeObjects, key: str) -> bool:
    return objects.read(key + MANIFEST_V0) is not None


def drop_manifest_v0(objects: LakeObjects, key: str) -> None:
    """After the first versioned commit: the version 0 documents it replaced."""
    objects.delete(key + MANIFEST_V0)
    objects.delete(key + CHECKPOINT_V0)


def ddl_records_v0(objects: LakeObjects, prefix: str) -> list[dict[str, Any]]:
    """The DDL records of ``ddl.json`` beside the records' folder ``prefix`` (ends in '/'); none where absent."""
    docs = json.loads(objects.read(prefix.rstrip("/") + ".json") or b"[]")
    return list(docs)


def cursor_v0_key(prefix: str, client_id: str) -> str:
    """Where a version 0 consumer cursor is kept: one document per client, replaced in place."""
    return f"{prefix}{client_id}.json"
