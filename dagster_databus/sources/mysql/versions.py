"""Which statements a server accepts, chosen by its version: MySQL 8.4 removed ``SHOW MASTER STATUS`` and
``SHOW SLAVE STATUS`` (for ``SHOW BINARY LOG STATUS``, 8.2+, and ``SHOW REPLICA STATUS``, 8.0.22+);
MariaDB names the binlog's end ``SHOW BINLOG STATUS`` since 10.5.2 and keeps the old names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dagster_databus.errors import CaptureNotInstalledError

if TYPE_CHECKING:
    from dagster_databus.sources.mysql.connect import Cursor


@dataclass(frozen=True, slots=True)
class ServerVersion:
    """A server's flavour and version number, from ``SELECT VERSION()``."""

    mariadb: bool
    number: tuple[int, int, int]

    @classmethod
    def parse(cls, text: str) -> ServerVersion:
        """``10.11.19-MariaDB-0+deb12u1-log``, ``8.4.0``, ``5.7.44-log``, ``9.1.0-commercial``."""
        match = re.match(r"(?:5\.5\.5-)?(\d+)\.(\d+)\.(\d+)", text)
        if not match:
            raise ValueError(f"not a MySQL or MariaDB version: {text!r}")
        major, minor, patch = (int(g) for g in match.groups())
        return cls("mariadb" in text.lower(), (major, minor, patch))

    @classmethod
    def of(cls, cur: Cursor) -> ServerVersion:
        cur.execute("SELECT VERSION()")
        row = cur.fetchone()
        assert row is not None  # a SELECT without FROM returns its one row
        return cls.parse(str(row[0]))

    def at_least(self, mariadb: tuple[int, int, int], mysql: tuple[int, int, int]) -> bool:
        return self.number >= (mariadb if self.mariadb else mysql)

    @property
    def binlog_status(self) -> str:
        """The statement that reports the binlog's current file and position."""
        if self.mariadb:
            return "SHOW BINLOG STATUS" if self.at_least((10, 5, 2), (0, 0, 0)) else "SHOW MASTER STATUS"
        return "SHOW BINARY LOG STATUS" if self.number >= (8, 2, 0) else "SHOW MASTER STATUS"

    @property
    def replica_status(self) -> str:
        """The statement that reports a replica's state."""
        return "SHOW REPLICA STATUS" if self.at_least((10, 5, 1), (8, 0, 22)) else "SHOW SLAVE STATUS"

    def __str__(self) -> str:
        return f"{'MariaDB' if self.mariadb else 'MySQL'} {'.'.join(map(str, self.number))}"


def binlog_end(cur: Cursor, source: str) -> tuple[str, int]:
    """The binlog's current file and position, by the statement the server's version accepts."""
    cur.execute(ServerVersion.of(cur).binlog_status)
    row = cur.fetchone()
    if not row:
        raise CaptureNotInstalledError(f"MySQL source {source!r} has binary logging off",
                                       "enable log_bin under [mysqld] and restart the server", source=source)
    return str(row[0]), int(row[1])
