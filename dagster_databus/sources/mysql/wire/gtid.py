"""The GTID of a transaction from the event that opens it: MariaDB's ``domain-server-sequence``, MySQL's
``uuid:number`` and, since MySQL 8.3, ``uuid:tag:number``. Capture keeps the last one in its checkpoint
state (a failover finds the position after it on the standby)."""

from __future__ import annotations

import uuid

from dagster_databus.sources.mysql.wire.codes import ANONYMOUS_GTID, GTID, GTID_TAGGED, MARIADB_GTID
from dagster_databus.sources.mysql.wire.stream import Event


def gtid_text(code: int, event: Event) -> str:
    """The GTID an opening event carries ('' for MySQL's anonymous transactions)."""
    body = event.body
    if code == MARIADB_GTID:  # sequence 8, domain 4, flags 1 (the server id is the header's)
        sequence = int.from_bytes(body[:8], "little")
        domain = int.from_bytes(body[8:12], "little")
        return f"{domain}-{event.server_id}-{sequence}"
    if code == GTID:  # flags 1, source uuid 16, number 8
        return f"{uuid.UUID(bytes=bytes(body[1:17]))}:{int.from_bytes(body[17:25], 'little', signed=True)}"
    if code == GTID_TAGGED:
        from dagster_databus.sources.mysql.wire.serialization import tagged_gtid

        source, tag, number = tagged_gtid(body)
        return f"{source}:{tag}:{number}" if tag else f"{source}:{number}"
    assert code == ANONYMOUS_GTID
    return ""
