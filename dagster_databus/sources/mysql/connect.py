"""pymysql connections to a MySQL source's servers, with TLS as the source's ``tls`` block says and the RSA
key exchange of ``caching_sha2_password``, and one TLS context per setting shared by every connection.

This module is the one that imports pymysql, which ships no type stubs: the rest of the package reaches the
driver through its names here, typed (``Cursor``, ``MySQLError``, ``OperationalError``).

``tls_kwargs`` turns the config into pymysql's keyword arguments as plain data (paths and PEM text, never an
``SSLContext``), so the same settings reach the queries, the binlog stream and a Spark task's bootstrap
read (``servers.MysqlServers.connection_settings``). ``Connection`` builds the context from them.

pymysql alone would build a fresh ``SSLContext`` for every connection, loading the system's CA paths
each time: about 40 ms, more than the rest of the connect. Capture, bootstrap and the failover search
open several connections per run, so they share one context per setting (rebuilt when a file changes).
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol, cast

import pymysql  # type: ignore[import-untyped]  # no stubs (types-PyMySQL is not a dependency): typed below
from pymysql.constants import CLIENT, CR  # type: ignore[import-untyped]  # as above

from dagster_databus.config import MysqlSourceConfig
from dagster_databus.errors import ConfigError

Row = tuple[Any, ...]
# pymysql's errors: every error the server or the connection raises, and those of the connection or a lost server.
MySQLError: type[Exception] = pymysql.err.MySQLError
OperationalError: type[Exception] = pymysql.err.OperationalError


class Cursor(Protocol):
    """What capture uses of a pymysql cursor (the default one: rows are tuples in select-list order)."""

    def execute(self, query: str, args: object = None) -> int: ...

    def fetchone(self) -> Row | None: ...

    def fetchall(self) -> Sequence[Row]: ...

    def fetchmany(self, size: int) -> Sequence[Row]: ...

    def close(self) -> None: ...

    def __enter__(self) -> Cursor: ...

    def __exit__(self, *exc: object) -> None: ...


# OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH and X509_V_ERR_IP_ADDRESS_MISMATCH: a good certificate of another server.
_NAME_MISMATCH = (62, 64)
# TLS failures that are the network's (the peer hung up mid-handshake), left to pymysql (error 2003, as any
# lost connection) rather than blamed on a setting.
_TRANSIENT = (ssl.SSLEOFError, ssl.SSLZeroReturnError)


class TlsRefused(pymysql.err.OperationalError):  # type: ignore[misc]  # pymysql's classes are Any to mypy
    """TLS could not be set up as configured, before any credential was sent. ``setting`` is the field at
    fault, relative to the source (``tls.mode``, ``tls.ca``, ``tls.cert``, ``tls.key``, or ``host`` when
    the certificate names another server); ``problem`` and ``fix`` read as a ``ConfigError``'s."""

    def __init__(self, setting: str, problem: str, fix: str) -> None:
        super().__init__(CR.CR_SSL_CONNECTION_ERROR, f"{problem}\nFix: {fix}")
        self.setting, self.problem, self.fix = setting, problem, fix


def tls_kwargs(config: MysqlSourceConfig, standby: bool = False) -> dict[str, Any]:
    """pymysql's keyword arguments for the source's ``tls`` block and the server's RSA public key, for the
    primary's server or the standby's: plain data a Spark task can be handed, used with ``Connection``.

    ``preferred`` passes no TLS option (pymysql's PREFERRED mode); the other modes that encrypt pass an
    ``ssl`` dict (pymysql's documented ``mysql_ssl_set``-like form: the one that can say "TLS, verify
    nothing", which ``required`` is), whose context ``Connection`` builds."""
    tls = config.tls
    out: dict[str, Any] = {}
    if tls.mode == "disabled":
        out["ssl_disabled"] = True
    elif tls.mode != "preferred":
        out["ssl"] = {"verify_mode": tls.mode in ("verify_ca", "verify_identity"),
                      "check_hostname": tls.mode == "verify_identity",
                      **{name: str(path) for name, path in (("ca", tls.ca), ("cert", tls.cert), ("key", tls.key))
                         if path is not None}}
    if standby:
        key_path = config.standby.server_public_key if config.standby is not None else None
        field = "standby.server_public_key"
    else:
        key_path, field = config.server_public_key, "server_public_key"
    if key_path is not None:
        out["server_public_key"] = _public_key(key_path, f"sources.{config.name}.{field}")
    return out


def _public_key(path: Path, field: str) -> str:
    """The PEM text of a server's RSA public key file, checked to be one (it travels to tasks as text)."""
    from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    fix = ("name the server's RSA public key (PEM): the file its caching_sha2_password_public_key_path names "
           "(public_key.pem in its data directory), or `SHOW STATUS LIKE 'Caching_sha2_password_rsa_public_key'`; "
           "or remove the setting and the client asks the server for it")
    try:
        text = Path(path).read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(field, f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}",
                          fix) from None
    try:
        key = load_pem_public_key(text.encode("ascii"))
    except ValueError:
        key = None
    if not isinstance(key, RSAPublicKey):
        raise ConfigError(field, f"{path} is not an RSA public key in PEM form", fix)
    return text


def tls_context(ca: str | None, cert: str | None, key: str | None, verify: bool,
                check_hostname: bool) -> ssl.SSLContext:
    """The shared context for these settings; built again when one of the files has changed."""
    stamps = tuple(_stamp(setting, path) for setting, path in (("tls.ca", ca), ("tls.cert", cert), ("tls.key", key)))
    return _context(ca, cert, key, verify, check_hostname, stamps)


def preferred_context() -> ssl.SSLContext:
    """What pymysql builds for PREFERRED mode: encrypt if offered, verify nothing (as pymysql does)."""
    return tls_context(None, None, None, verify=False, check_hostname=False)


def _stamp(setting: str, path: str | None) -> tuple[int, int] | None:
    if path is None:
        return None
    try:
        stat = os.stat(path)
    except OSError as exc:
        raise TlsRefused(setting, f"cannot read {setting.split('.')[-1]} file {path}: {exc.strerror or exc}",
                         f"make {path} readable by this process (Spark executors included: a bootstrap's tasks "
                         "connect from theirs), or correct the path") from None
    return stat.st_mtime_ns, stat.st_size


@lru_cache(maxsize=16)
def _context(ca: str | None, cert: str | None, key: str | None, verify: bool, check_hostname: bool,
             stamps: tuple[tuple[int, int] | None, ...]) -> ssl.SSLContext:
    del stamps  # part of the cache key only
    try:
        context = ssl.create_default_context(cafile=ca)
    except ssl.SSLError as exc:
        raise TlsRefused("tls.ca", f"{ca} holds no CA certificate in PEM form ({exc.reason or exc})",
                         "name the PEM file of the CA that signed the server's certificate") from None
    # MySQL's own generated certificates fail Python 3.13's strict X.509 checks (pymysql relaxes them too).
    context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    # Unlike pymysql, the host name is checked without a CA file too (against the system's trust store).
    context.check_hostname = verify and check_hostname
    context.verify_mode = ssl.CERT_REQUIRED if verify else ssl.CERT_NONE
    if cert is not None:
        try:
            context.load_cert_chain(cert, keyfile=key)
        except ssl.SSLError as exc:
            raise TlsRefused("tls.key", f"the client certificate {cert} and key {key} do not load as a pair "
                             f"({exc.reason or exc})",
                             "name the PEM certificate in tls.cert and its own unencrypted private key in "
                             "tls.key") from None
    return context


class Connection(pymysql.connections.Connection):  # type: ignore[misc]  # pymysql's classes are Any to mypy
    """A ``pymysql`` connection; use it (or pass it as python-mysql-replication's ``pymysql_wrapper``)
    wherever ``pymysql.connect`` would be called, with ``tls_kwargs``'s settings.

    It refuses, before sending any credential, a server that does not offer the TLS the settings require
    (pymysql before 1.2 carried on in plain text; 1.2 refuses after the handshake), and turns certificate failures into
    ``TlsRefused`` naming the setting to fix."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        key = kwargs.get("server_public_key")
        if isinstance(key, str):  # PEM text, as tls_kwargs gives it; pymysql's RSA code wants bytes
            kwargs["server_public_key"] = key.encode("ascii")
        super().__init__(*args, **kwargs)

    def cursor(self, cursor: object = None) -> Cursor:
        """A cursor, typed (pymysql's own ``cursor``)."""
        return cast(Cursor, super().cursor(cursor))

    def _create_ssl_ctx(self, sslp: Any) -> ssl.SSLContext:
        if isinstance(sslp, dict) and not set(sslp) - {"ca", "cert", "key", "verify_mode", "check_hostname"}:
            ca = sslp.get("ca")
            verify = sslp.get("verify_mode", ca is not None)
            if isinstance(verify, bool):
                return tls_context(ca, sslp.get("cert"), sslp.get("key"), verify,
                                   bool(sslp.get("check_hostname", ca is not None)))
        context: ssl.SSLContext = super()._create_ssl_ctx(sslp)
        return context

    def _request_authentication(self) -> None:
        where = f"{self.host}:{self.port}"
        if self._ssl_required and not self.server_capabilities & CLIENT.SSL:
            raise TlsRefused("tls.mode", f"the server at {where} does not offer TLS, which tls.mode requires",
                             "enable TLS on the server (ssl_cert and ssl_key under [mysqld]; MySQL 8 has it by "
                             "default), or set tls.mode: preferred to accept an unencrypted connection")
        try:
            super()._request_authentication()
        except ssl.SSLCertVerificationError as exc:
            reason = exc.verify_message or exc.reason or str(exc)
            if exc.verify_code in _NAME_MISMATCH:
                raise TlsRefused("host", f"the certificate of the server at {where} is not for {self.host!r} "
                                 f"({reason})",
                                 "connect by a name (or address) the certificate carries, or set tls.mode: "
                                 "verify_ca, which checks the CA only") from None
            raise TlsRefused("tls.ca", f"the certificate of the server at {where} failed verification ({reason})",
                             "set tls.ca to the CA certificate (PEM) that signed the server's certificate (a MySQL "
                             "server's own is ca.pem in its data directory); without tls.ca the system's trust "
                             "store is used") from None
        except ssl.SSLError as exc:
            if isinstance(exc, _TRANSIENT):
                raise
            raise TlsRefused("tls.mode", f"the TLS handshake with the server at {where} failed "
                             f"({exc.reason or exc})",
                             "check the server's TLS settings (a server that asks for a client certificate "
                             "needs tls.cert and tls.key)") from None
