"""pymysql connections that share one TLS context.

With no TLS options pymysql connects in PREFERRED mode (TLS when the server offers it, without
verifying the certificate) and builds a fresh ``SSLContext`` for every connection, loading the
system's CA paths each time: about 40 ms, more than the rest of the connect. Capture, bootstrap and
the failover search open several connections per run, so they share one context built the same way.
"""

from __future__ import annotations

import ssl
from functools import cache
from typing import Any

import pymysql


@cache
def preferred_context() -> ssl.SSLContext:
    """What pymysql builds for PREFERRED mode: encrypt if offered, verify nothing (as pymysql does)."""
    context = ssl.create_default_context()
    context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


class Connection(pymysql.connections.Connection):
    """A ``pymysql`` connection; use it (or pass it as python-mysql-replication's ``pymysql_wrapper``)
    wherever ``pymysql.connect`` would be called."""

    def _create_ssl_ctx(self, sslp: Any) -> ssl.SSLContext:
        if isinstance(sslp, dict) and not sslp:  # PREFERRED mode: no TLS options given
            return preferred_context()
        return super()._create_ssl_ctx(sslp)
