"""caching_sha2_password accounts (MySQL 8's default) and sha256_password ones, over TLS and over the RSA key
exchange, and TLS as a source's ``tls`` block says, on the connections capture makes: queries, the binlog
stream's settings and a bootstrap task's. Connections are opened by the product's own code from a parsed
config, against ``tests/mysql_auth_server.py`` (MySQL's side of authentication on a real socket), and against
a MariaDB started with TLS whose accounts refuse unencrypted connections (capture and a bootstrap read)."""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from dagster_databus import capture
from dagster_databus.config import DatabusConfig
from dagster_databus.errors import ConfigError
from dagster_databus.sources import open_source, read_range
from dagster_databus.sources.mysql.connect import Connection, TlsRefused, preferred_context, tls_context
from dagster_databus.sources.mysql.reads import open_task_connection
from dagster_databus.sources.mysql.source import MysqlSource
from tests.support.harness import MysqlHarness, make_config
from tests.support.mariadb import MariaDBServer
from tests.support.mysql_auth_server import Authority, Login, MysqlAuthServer

USER, PASSWORD = "databus", "s3cret-pw"


@dataclass(frozen=True)
class Pki:
    ca: Path
    server: tuple[Path, Path]  # for 127.0.0.1 and localhost
    elsewhere: tuple[Path, Path]  # for db.example.internal only
    client: tuple[Path, Path]
    stranger: Path  # a CA that signed none of these


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    folder = tmp_path_factory.mktemp("pki")
    ca = Authority(folder, "ca")
    return Pki(ca.path, ca.issue("server", dns=("localhost",), ips=("127.0.0.1",)),
               ca.issue("elsewhere", dns=("db.example.internal",)), ca.issue("databus", client=True),
               Authority(folder, "stranger").path)


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@contextmanager
def serve(rsa_key: rsa.RSAPrivateKey, **options: Any) -> Iterator[MysqlAuthServer]:
    """The authentication server for ``USER``; on leaving, the server must have had no failure of its own."""
    with MysqlAuthServer({USER: PASSWORD}, rsa_key, **options) as server:
        yield server
    assert not server.errors, server.errors


@pytest.fixture
def tls_server(rsa_key: rsa.RSAPrivateKey, pki: Pki) -> Iterator[MysqlAuthServer]:
    with serve(rsa_key, certificate=pki.server) as server:
        yield server


@pytest.fixture
def plain_server(rsa_key: rsa.RSAPrivateKey) -> Iterator[MysqlAuthServer]:
    with serve(rsa_key) as server:
        yield server


def mysql_source(tmp_path: Path, port: int, **fields: Any) -> MysqlSource:
    """The source a config with these fields makes (paths relative to ``tmp_path``, the config's folder)."""
    config = make_config(tmp_path / "lake", {"name": "shop", "kind": "mysql", "host": "127.0.0.1", "port": port,
                                             "user": USER, "password": PASSWORD, "database": "shop",
                                             "tables": [{"name": "items", "primary_key": ["id"]}], **fields})
    return cast(MysqlSource, open_source(config.sources[0]))


def session(conn: Any) -> tuple[int, str]:
    """``SELECT 1`` and the connection's TLS cipher (empty: not encrypted), as the server reports them."""
    with conn.cursor() as cur:
        cur.execute("SELECT 1")
        one = cur.fetchone()[0]
        cur.execute("SHOW STATUS LIKE 'Ssl_cipher'")
        return one, cur.fetchone()[1]


def source_session(source: MysqlSource, **connect: Any) -> tuple[int, str]:
    with closing(source.servers.connect(**connect)) as conn:
        return session(conn)


def write_key(path: Path, key: rsa.RSAPrivateKey) -> Path:
    path.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                   serialization.PublicFormat.SubjectPublicKeyInfo))
    return path


# -- caching_sha2_password against the authentication server ------------------------------------------------


def test_full_authentication_over_tls_sends_the_password_inside_tls(tls_server: MysqlAuthServer, pki: Pki,
                                                                    tmp_path: Path) -> None:
    source = mysql_source(tmp_path, tls_server.port, tls={"mode": "verify_identity", "ca": str(pki.ca)})
    one, cipher = source_session(source)
    assert one == 1 and cipher
    assert tls_server.logins == [Login(USER, "full", tls=True, key_requested=False)]


def test_fast_authentication_from_the_servers_cache(plain_server: MysqlAuthServer, tmp_path: Path) -> None:
    plain_server.remember(USER)  # as an earlier full authentication leaves it
    source = mysql_source(tmp_path, plain_server.port, tls={"mode": "disabled"})
    assert source_session(source) == (1, "")
    assert plain_server.logins == [Login(USER, "fast", tls=False, key_requested=False)]


def test_full_authentication_without_tls_asks_the_server_for_its_rsa_key(plain_server: MysqlAuthServer,
                                                                        tmp_path: Path) -> None:
    source = mysql_source(tmp_path, plain_server.port)  # tls.mode preferred: the server offers none
    assert source_session(source) == (1, "")
    # the binlog stream's connections are made from these settings (pymysql_wrapper=Connection)
    plain_server.forget()
    with closing(Connection(**source.servers.connection_settings())) as conn:
        assert session(conn) == (1, "")
    assert plain_server.logins == [Login(USER, "full", tls=False, key_requested=True)] * 2


def test_a_configured_server_public_key_is_used_without_asking(plain_server: MysqlAuthServer, tmp_path: Path) -> None:
    write_key(tmp_path / "primary.pem", plain_server.rsa_key)
    source = mysql_source(tmp_path, plain_server.port, server_public_key="primary.pem")  # the config's folder
    assert source_session(source) == (1, "")
    assert plain_server.logins == [Login(USER, "full", tls=False, key_requested=False)]

    # a key that is not the server's: the server cannot read the password
    write_key(tmp_path / "old.pem", rsa.generate_private_key(public_exponent=65537, key_size=2048))
    plain_server.forget()
    with pytest.raises(ConfigError) as err:
        mysql_source(tmp_path, plain_server.port, server_public_key="old.pem").servers.connect()
    assert err.value.field == "sources.shop.password" and "server_public_key" in err.value.fix


@pytest.mark.parametrize("over", ["tls", "rsa"])
def test_a_wrong_password_is_a_config_error_on_the_password(over: str, request: pytest.FixtureRequest,
                                                            tmp_path: Path) -> None:
    server: MysqlAuthServer = request.getfixturevalue("tls_server" if over == "tls" else "plain_server")
    source = mysql_source(tmp_path, server.port, password="not-the-password")
    with pytest.raises(ConfigError) as err:
        source.servers.probe()
    assert err.value.field == "sources.shop.password" and "access denied for user 'databus'" in str(err.value)
    assert server.logins == [Login(USER, "denied", tls=over == "tls", key_requested=over == "rsa")]


@pytest.mark.parametrize("over", ["tls", "rsa"])
def test_sha256_password_accounts(over: str, rsa_key: rsa.RSAPrivateKey, pki: Pki, tmp_path: Path) -> None:
    certificate = pki.server if over == "tls" else None
    with MysqlAuthServer({USER: PASSWORD}, rsa_key, certificate=certificate, plugin="sha256_password") as server:
        tls = {"mode": "verify_ca", "ca": str(pki.ca)} if over == "tls" else {"mode": "disabled"}
        one, cipher = source_session(mysql_source(tmp_path, server.port, tls=tls))
        assert one == 1 and bool(cipher) == (over == "tls")
        assert server.logins == [Login(USER, "full", tls=over == "tls", key_requested=over == "rsa")]
    assert not server.errors


# -- refusals: before any credential leaves ----------------------------------------------------------------


def test_tls_required_refuses_a_server_without_tls(plain_server: MysqlAuthServer, tmp_path: Path) -> None:
    source = mysql_source(tmp_path, plain_server.port, tls={"mode": "required"})
    with pytest.raises(ConfigError) as err:
        source.servers.probe()
    assert err.value.field == "sources.shop.tls.mode" and "does not offer TLS" in str(err.value)
    with pytest.raises(TlsRefused, match="does not offer TLS"):  # a bootstrap task's connection, the same
        open_task_connection(source.reads.task_connection())
    assert plain_server.handshakes_answered == 0


@pytest.mark.parametrize("ca", ["stranger", "system trust store"])
def test_verify_ca_refuses_a_certificate_another_ca_signed(ca: str, tls_server: MysqlAuthServer, pki: Pki,
                                                            tmp_path: Path) -> None:
    tls = {"mode": "verify_ca", **({"ca": str(pki.stranger)} if ca == "stranger" else {})}
    with pytest.raises(ConfigError) as err:
        mysql_source(tmp_path, tls_server.port, tls=tls).servers.probe()
    assert err.value.field == "sources.shop.tls.ca" and "failed verification" in str(err.value)
    assert "system's trust store" in err.value.fix
    assert tls_server.handshakes_answered == 0


def test_verify_identity_refuses_a_certificate_for_another_host(rsa_key: rsa.RSAPrivateKey, pki: Pki,
                                                               tmp_path: Path) -> None:
    with serve(rsa_key, certificate=pki.elsewhere) as server:
        with pytest.raises(ConfigError) as err:
            mysql_source(tmp_path, server.port, tls={"mode": "verify_identity", "ca": str(pki.ca)}).servers.probe()
        assert err.value.field == "sources.shop.host"
        assert "not for '127.0.0.1'" in str(err.value) and server.handshakes_answered == 0
        # verify_ca checks the signature only
        assert source_session(mysql_source(tmp_path, server.port, tls={"mode": "verify_ca", "ca": str(pki.ca)}))[1]


def test_the_standby_connects_with_the_sources_tls_and_its_own_key(tls_server: MysqlAuthServer, pki: Pki,
                                                                   rsa_key: rsa.RSAPrivateKey, tmp_path: Path) -> None:
    with serve(rsa_key, certificate=pki.elsewhere) as standby:
        source = mysql_source(tmp_path, tls_server.port, tls={"mode": "verify_identity", "ca": str(pki.ca)},
                              standby={"host": "127.0.0.1", "port": standby.port})
        assert source_session(source)[1]
        with pytest.raises(ConfigError) as err:  # the standby's certificate is checked as the primary's is
            source.servers.connect(role="standby")
        assert err.value.field == "sources.shop.standby.host"

    # each server its own RSA key pair
    standby_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    write_key(tmp_path / "primary.pem", rsa_key)
    write_key(tmp_path / "standby.pem", standby_key)
    with serve(rsa_key) as primary, serve(standby_key) as standby:
        source = mysql_source(tmp_path, primary.port, tls={"mode": "disabled"}, server_public_key="primary.pem",
                              standby={"host": "127.0.0.1", "port": standby.port, "server_public_key": "standby.pem"})
        assert source_session(source) == source_session(source, role="standby") == (1, "")
        assert primary.logins == standby.logins == [Login(USER, "full", tls=False, key_requested=False)]


def test_the_bootstrap_task_connection_carries_the_tls_settings(tls_server: MysqlAuthServer, pki: Pki,
                                                                tmp_path: Path) -> None:
    cert, key = pki.client
    source = mysql_source(tmp_path, tls_server.port,
                          tls={"mode": "verify_identity", "ca": str(pki.ca), "cert": str(cert), "key": str(key)})
    spec = source.reads.task_connection()
    assert spec["ssl"] == {"verify_mode": True, "check_hostname": True, "ca": str(pki.ca), "cert": str(cert),
                           "key": str(key)}
    assert pickle.loads(pickle.dumps(spec)) == spec
    with closing(open_task_connection(json.loads(json.dumps(spec)))) as conn:  # as a task receives it
        one, cipher = session(conn)
    assert one == 1 and cipher
    assert tls_server.logins == [Login(USER, "full", tls=True, key_requested=False)]


# -- configuration ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("tls", "field", "words"), [
    ({"mode": "verify_ca", "cert": "c.pem"}, "tls.key", "cert is given without key"),
    ({"mode": "required", "key": "k.pem"}, "tls.key", "key is given without cert"),
    ({"ca": "ca.pem"}, "tls.ca", "mode preferred checks nothing"),
    ({"mode": "required", "ca": "ca.pem"}, "tls.ca", "set mode: verify_ca"),
    ({"cert": "c.pem", "key": "k.pem"}, "tls.cert", "set mode: required"),
    ({"mode": "verify-ca"}, "tls.mode", "'verify_ca'"),
])
def test_tls_settings_that_contradict_the_mode_are_refused(tls: dict[str, str], field: str, words: str,
                                                           tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        mysql_source(tmp_path, 3306, tls=tls)
    assert err.value.field == f"sources[0].{field}" and words in str(err.value)


def test_tls_files_are_taken_from_the_config_folder_and_read_when_connecting(tmp_path: Path) -> None:
    source = mysql_source(tmp_path, 3306, tls={"mode": "verify_ca", "ca": "certs/ca.pem"})
    assert source.config.tls.ca == tmp_path / "certs" / "ca.pem"
    with pytest.raises(ConfigError) as err:  # before any connection is attempted
        source.servers.connect()
    assert err.value.field == "sources.shop.tls.ca" and "cannot read ca file" in str(err.value)

    (tmp_path / "not-a-key.pem").write_text("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    for path, problem in (("missing.pem", "cannot read"), ("not-a-key.pem", "is not an RSA public key")):
        with pytest.raises(ConfigError) as err:
            mysql_source(tmp_path, 3306, server_public_key=path).servers.connect()
        assert err.value.field == "sources.shop.server_public_key" and problem in str(err.value)


def test_connections_share_one_tls_context_until_a_file_changes(pki: Pki, tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(pki.ca.read_bytes())
    first = tls_context(str(ca), None, None, verify=True, check_hostname=True)
    assert tls_context(str(ca), None, None, verify=True, check_hostname=True) is first
    assert preferred_context() is preferred_context() and preferred_context() is not first
    ca.write_bytes(pki.stranger.read_bytes())
    os.utime(ca, ns=(0, 1))  # a rotated file, even within the clock's resolution
    assert tls_context(str(ca), None, None, verify=True, check_hostname=True) is not first


# -- a MariaDB with TLS: the real server's side ------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_mariadb(pki: Pki) -> Iterator[MariaDBServer]:
    """A MariaDB with TLS, and accounts that refuse a connection without it (REQUIRE SSL) or without a client
    certificate its CA signed (REQUIRE X509)."""
    cert, key = pki.server
    server = MariaDBServer(extra_args=[f"--ssl-ca={pki.ca}", f"--ssl-cert={cert}", f"--ssl-key={key}"])
    try:
        server.execute("CREATE USER 'databus_tls'@'%' IDENTIFIED BY 'pw' REQUIRE SSL",
                       "GRANT ALL PRIVILEGES ON *.* TO 'databus_tls'@'%'",
                       "CREATE USER 'databus_x509'@'%' IDENTIFIED BY 'pw' REQUIRE X509",
                       "GRANT ALL PRIVILEGES ON *.* TO 'databus_x509'@'%'")
        yield server
    finally:
        server.close()


def mariadb_config(harness: MysqlHarness, tmp_path: Path, user: str, tls: dict[str, str]) -> DatabusConfig:
    return make_config(tmp_path / "lake", {**harness.source_config("shop", [("items", ["id"])]), "user": user,
                                           "password": "pw", "tls": tls})


def mariadb_source(harness: MysqlHarness, tmp_path: Path, user: str, tls: dict[str, str]) -> MysqlSource:
    return cast(MysqlSource, open_source(mariadb_config(harness, tmp_path, user, tls).sources[0]))


@pytest.mark.server
def test_verify_ca_to_mariadb_encrypts_queries_capture_and_bootstrap_reads(tls_mariadb: MariaDBServer, pki: Pki,
                                                                          tmp_path: Path) -> None:
    harness = MysqlHarness(tls_mariadb)
    harness.execute(["CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(20))"])
    config = mariadb_config(harness, tmp_path, "databus_tls", {"mode": "verify_ca", "ca": str(pki.ca)})
    source = cast(MysqlSource, open_source(config.sources[0]))
    assert source_session(source)[1]
    with pytest.raises(ConfigError) as err:  # the account refuses what is not encrypted: the reads below were
        mariadb_source(harness, tmp_path, "databus_tls", {"mode": "disabled"}).servers.probe()
    assert err.value.field == "sources.shop.password"

    capture.install(config, "shop")
    capture.run(config, "shop")
    harness.execute([("INSERT INTO items VALUES (?, ?)", (i, f"item {i}")) for i in range(1, 6)])
    assert capture.run(config, "shop").events == 5  # the binlog stream, through the same account

    read = source.reads.ranges("items", rows_per_range=2)
    assert len(read.ranges) > 1 and read.spec.connection["ssl"]["ca"] == str(pki.ca)
    ids = sorted(i for n in range(len(read.ranges)) for batch in read_range(read, n).batches
                 for i in batch.column("id").to_pylist())
    assert ids == [1, 2, 3, 4, 5]


@pytest.mark.server
def test_a_client_certificate_for_an_account_that_requires_one(tls_mariadb: MariaDBServer, pki: Pki,
                                                               tmp_path: Path) -> None:
    harness = MysqlHarness(tls_mariadb)
    cert, key = pki.client
    tls = {"mode": "verify_identity", "ca": str(pki.ca)}
    source = mariadb_source(harness, tmp_path, "databus_x509", {**tls, "cert": str(cert), "key": str(key)})
    assert source_session(source)[1]
    with pytest.raises(ConfigError) as err:
        mariadb_source(harness, tmp_path, "databus_x509", tls).servers.probe()
    assert err.value.field == "sources.shop.password"


def test_tls_required_against_a_mariadb_without_tls(mariadb: MariaDBServer, tmp_path: Path) -> None:
    harness = MysqlHarness(mariadb)
    config = make_config(tmp_path / "lake", {**harness.source_config("shop", [("items", ["id"])]),
                                             "tls": {"mode": "required"}})
    with pytest.raises(ConfigError) as err:
        capture.install(config, "shop")
    assert err.value.field == "sources.shop.tls.mode"
