"""A MySQL-protocol server for the authentication tests: it speaks the connection phase as MySQL 8 does for
accounts of the ``caching_sha2_password`` plugin (or ``sha256_password``) on a free loopback port, real bytes
on a real socket, so the product's own connections (pymysql underneath) are tested at the seam where
authentication happens. No MySQL server can run here, and MariaDB has neither plugin.

What it implements, after MySQL's documentation of the protocol:

- the initial handshake (Protocol::HandshakeV10), offering CLIENT_SSL when it has a certificate, the
  SSLRequest that switches the socket to TLS, and the HandshakeResponse41:
  https://dev.mysql.com/doc/dev/mysql-server/latest/page_protocol_connection_phase_packets_protocol_handshake_v10.html
  https://dev.mysql.com/doc/dev/mysql-server/latest/page_protocol_connection_phase_packets_protocol_ssl_request.html
  https://dev.mysql.com/doc/dev/mysql-server/latest/page_protocol_connection_phase_packets_protocol_handshake_response.html
- caching_sha2_password: the scramble XOR(SHA256(password), SHA256(SHA256(SHA256(password)), nonce)) checked
  against the cache entry SHA256(SHA256(password)) a full authentication leaves (fast authentication,
  0x01 0x03); else 0x01 0x04 and a full authentication: the password in clear over TLS, or without TLS
  RSA-OAEP(password + NUL XOR nonce) under the server's key, which a client may ask for first with 0x02
  (the server answers 0x01 + the PEM key):
  https://dev.mysql.com/doc/dev/mysql-server/latest/page_caching_sha2_authentication_exchanges.html
- sha256_password: the same full authentication, no cache, the key asked for with 0x01:
  https://dev.mysql.com/doc/dev/mysql-server/latest/page_protocol_connection_phase_authentication_methods_sha256_password_authentication.html
- a wrong password: ERR 1045 (28000) "Access denied"; the OK, ERR and EOF packets:
  https://dev.mysql.com/doc/dev/mysql-server/latest/page_protocol_basic_response_packets.html
- the command phase, just enough for a client's connect and a query (COM_QUERY with the text resultset,
  COM_PING, COM_INIT_DB, COM_QUIT): OK for SET; one-row results for SELECT 1, SELECT VERSION(),
  SELECT CURRENT_USER() and SHOW STATUS LIKE 'Ssl_cipher' / 'Ssl_version' (the connection's, empty without TLS):
  https://dev.mysql.com/doc/dev/mysql-server/latest/page_protocol_com_query_response_text_resultset.html

Each connection's login is recorded (``logins``): who, how (fast, or full over TLS or RSA), whether the key
was asked for, so a test can tell which exchange its client went through. ``Authority`` makes the test's
certificates (a CA and the certificates it signs), for this server and for MariaDB's TLS.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import ipaddress
import os
import socket
import ssl
import struct
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Capability flags (https://dev.mysql.com/doc/dev/mysql-server/latest/group__group__cs__capabilities__flags.html)
CLIENT_LONG_PASSWORD = 0x1
CLIENT_FOUND_ROWS = 0x2
CLIENT_LONG_FLAG = 0x4
CLIENT_CONNECT_WITH_DB = 0x8
CLIENT_PROTOCOL_41 = 0x200
CLIENT_SSL = 0x800
CLIENT_TRANSACTIONS = 0x2000
CLIENT_SECURE_CONNECTION = 0x8000
CLIENT_MULTI_STATEMENTS = 0x10000
CLIENT_MULTI_RESULTS = 0x20000
CLIENT_PLUGIN_AUTH = 0x80000
CLIENT_CONNECT_ATTRS = 0x100000
CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA = 0x200000
CAPABILITIES = (CLIENT_LONG_PASSWORD | CLIENT_FOUND_ROWS | CLIENT_LONG_FLAG | CLIENT_CONNECT_WITH_DB
                | CLIENT_PROTOCOL_41 | CLIENT_TRANSACTIONS | CLIENT_SECURE_CONNECTION | CLIENT_MULTI_STATEMENTS
                | CLIENT_MULTI_RESULTS | CLIENT_PLUGIN_AUTH | CLIENT_CONNECT_ATTRS
                | CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA)
SERVER_STATUS_AUTOCOMMIT = 0x2
UTF8MB4_GENERAL_CI, BINARY = 45, 63
TYPE_LONGLONG, TYPE_VAR_STRING = 0x08, 0xFD
COM_QUIT, COM_INIT_DB, COM_QUERY, COM_PING = 0x01, 0x02, 0x03, 0x0E

FAST_AUTH_OK, FULL_AUTH_NEEDED = b"\x01\x03", b"\x01\x04"
OAEP = padding.OAEP(mgf=padding.MGF1(algorithm=hashes.SHA1()), algorithm=hashes.SHA1(), label=None)


@dataclass(frozen=True)
class Login:
    """One connection's authentication, as the server saw it."""

    user: str
    method: str  # "fast", "full" (a full authentication) or "denied"
    tls: bool  # the password exchange ran inside TLS
    key_requested: bool  # the client asked for the server's RSA public key


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def lenenc_int(n: int) -> bytes:
    if n < 251:
        return bytes([n])
    if n < 1 << 16:
        return b"\xfc" + n.to_bytes(2, "little")
    if n < 1 << 24:
        return b"\xfd" + n.to_bytes(3, "little")
    return b"\xfe" + n.to_bytes(8, "little")


def lenenc_str(data: bytes) -> bytes:
    return lenenc_int(len(data)) + data


class MysqlAuthServer:
    """A server on 127.0.0.1 (``port``) for ``users`` (name → password), until ``close()``.

    With ``certificate`` (a PEM certificate and its key) it offers TLS. ``rsa_key`` is its key pair for the
    RSA exchange (generating one takes a moment: tests share one). ``plugin`` is the accounts' plugin.
    """

    def __init__(self, users: Mapping[str, str], rsa_key: rsa.RSAPrivateKey,
                 certificate: tuple[Path, Path] | None = None, plugin: str = "caching_sha2_password",
                 version: str = "8.0.36-databus-auth-test") -> None:
        self.users = dict(users)
        self.rsa_key = rsa_key
        self.public_pem = rsa_key.public_key().public_bytes(serialization.Encoding.PEM,
                                                            serialization.PublicFormat.SubjectPublicKeyInfo)
        self.plugin = plugin
        self.version = version
        self.tls: ssl.SSLContext | None = None
        if certificate is not None:
            self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.tls.load_cert_chain(*certificate)
        self.logins: list[Login] = []
        self.handshakes_answered = 0  # HandshakeResponse41 packets received: a login attempt's credentials
        self.errors: list[BaseException] = []  # the server's own failures (not a client hanging up)
        self._cache: dict[str, bytes] = {}  # user -> SHA256(SHA256(password)), after a full authentication
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._threads: list[threading.Thread] = []
        self._open: set[_Session] = set()
        self._accepting = threading.Thread(target=self._accept, name=f"mysql-auth-{self.port}", daemon=True)
        self._accepting.start()

    def remember(self, user: str) -> None:
        """Put ``user`` in the authentication cache, as a full authentication does."""
        with self._lock:
            self._cache[user] = sha256(sha256(self.users[user].encode()))

    def forget(self) -> None:
        """Empty the cache, as FLUSH PRIVILEGES (or a restart) does: the next logins authenticate in full."""
        with self._lock:
            self._cache.clear()

    def close(self) -> None:
        """Stop listening, end the connections still open, and wait for their threads."""
        with contextlib.suppress(OSError):  # shutdown, not close alone, wakes a thread blocked in accept()
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._accepting.join(5)
        for session in list(self._open):
            with contextlib.suppress(OSError):
                session.sock.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(5)

    def __enter__(self) -> MysqlAuthServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:  # closed
                return
            thread = threading.Thread(target=self._serve, args=(sock,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, sock: socket.socket) -> None:
        session = _Session(self, sock)
        self._open.add(session)
        try:
            session.run()
        except (EOFError, ConnectionError, ssl.SSLError, TimeoutError):
            pass  # the client hung up or refused our TLS: its side reports why
        except BaseException as exc:  # a bug here would otherwise only show as a client's odd error
            self.errors.append(exc)
        finally:
            self._open.discard(session)
            session.sock.close()


class _Session:
    """One connection: the connection phase, then commands until COM_QUIT."""

    def __init__(self, server: MysqlAuthServer, sock: socket.socket) -> None:
        self.server = server
        self.sock: socket.socket = sock
        sock.settimeout(30)
        self.seq = 0
        self.in_tls = False
        self.status = SERVER_STATUS_AUTOCOMMIT
        self.user = ""
        # 20 bytes without NUL (the client strips a trailing one) or '$', as MySQL generates them
        self.nonce = bytes(b % 0x5E + 0x21 for b in os.urandom(20)).replace(b"$", b"%")

    # -- packets -----------------------------------------------------------------------

    def _exactly(self, n: int) -> bytes:
        # recv never reads past n: after an SSLRequest the next bytes are the TLS handshake, not ours
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise EOFError("client closed the connection")
            out += chunk
        return out

    def read(self) -> bytes:
        header = self._exactly(4)
        self.seq = header[3] + 1  # the reply continues the sequence; a command restarts it at 0
        return self._exactly(int.from_bytes(header[:3], "little"))

    def send(self, payload: bytes) -> None:
        self.sock.sendall(len(payload).to_bytes(3, "little") + bytes([self.seq & 0xFF]) + payload)
        self.seq += 1

    def ok(self) -> None:
        self.send(b"\x00" + lenenc_int(0) + lenenc_int(0) + struct.pack("<HH", self.status, 0))

    def error(self, code: int, state: str, message: str) -> None:
        self.send(b"\xff" + struct.pack("<H", code) + b"#" + state.encode() + message.encode())

    def eof(self) -> None:
        self.send(b"\xfe" + struct.pack("<HH", 0, self.status))

    # -- connection phase -----------------------------------------------------------------

    def run(self) -> None:
        if not self.authenticate():
            return
        while self.command():
            pass

    def handshake(self) -> None:
        caps = CAPABILITIES | (CLIENT_SSL if self.server.tls else 0)
        plugin = self.server.plugin.encode()
        self.send(b"\x0a" + self.server.version.encode() + b"\0" + struct.pack("<I", threading.get_ident() & 0xFFFF)
                  + self.nonce[:8] + b"\0" + struct.pack("<H", caps & 0xFFFF) + bytes([UTF8MB4_GENERAL_CI])
                  + struct.pack("<HH", self.status, caps >> 16) + bytes([len(self.nonce) + 1]) + b"\0" * 10
                  + self.nonce[8:] + b"\0" + plugin + b"\0")

    def authenticate(self) -> bool:
        self.handshake()
        data = self.read()
        flags = struct.unpack_from("<I", data)[0]
        if flags & CLIENT_SSL and len(data) == 32:  # an SSLRequest: TLS first, then the real response
            if self.server.tls is None:
                self.error(1043, "08S01", "Bad handshake: this server offers no TLS")
                return False
            self.sock = self.server.tls.wrap_socket(self.sock, server_side=True)
            self.in_tls = True
            data = self.read()
            flags = struct.unpack_from("<I", data)[0]
        with self.server._lock:
            self.server.handshakes_answered += 1
        pos = 32  # capability flags, max packet size, character set, 23 bytes of filler
        end = data.index(b"\0", pos)
        self.user, pos = data[pos:end].decode(), end + 1
        if flags & CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA:
            n, pos = self._lenenc_at(data, pos)
        elif flags & CLIENT_SECURE_CONNECTION:
            n, pos = data[pos], pos + 1
        else:
            n = data.index(b"\0", pos) - pos
        response, pos = data[pos:pos + n], pos + n
        if flags & CLIENT_CONNECT_WITH_DB and pos < len(data):
            pos = data.index(b"\0", pos) + 1  # the database: any will do
        client_plugin = ""
        if flags & CLIENT_PLUGIN_AUTH and pos < len(data):
            end = data.index(b"\0", pos)
            client_plugin = data[pos:end].decode()
        if client_plugin != self.server.plugin:  # AuthSwitchRequest: answer with our plugin's data
            self.send(b"\xfe" + self.server.plugin.encode() + b"\0" + self.nonce + b"\0")
            response = self.read()
        if self.server.plugin == "caching_sha2_password":
            return self.caching_sha2(response)
        return self.sha256_password(response)

    @staticmethod
    def _lenenc_at(data: bytes, pos: int) -> tuple[int, int]:
        first = data[pos]
        if first < 251:
            return first, pos + 1
        size = {0xFC: 2, 0xFD: 3, 0xFE: 8}[first]
        return int.from_bytes(data[pos + 1:pos + 1 + size], "little"), pos + 1 + size

    def caching_sha2(self, scramble: bytes) -> bool:
        password = self.server.users.get(self.user)
        if not scramble:  # an empty password
            return self.finish("fast", password == "", key_requested=False)
        with self.server._lock:
            cached = self.server._cache.get(self.user)
        if cached is not None and len(scramble) == 32:
            # SHA256(password) = scramble XOR SHA256(cached, nonce); it must hash to the cached entry
            digest = bytes(a ^ b for a, b in zip(scramble, sha256(cached + self.nonce), strict=True))
            if sha256(digest) == cached:
                self.send(FAST_AUTH_OK)
                return self.finish("fast", True, key_requested=False)
        self.send(FULL_AUTH_NEEDED)
        return self.full_authentication(self.read(), password, key_request=b"\x02")

    def sha256_password(self, response: bytes) -> bool:
        password = self.server.users.get(self.user)
        if response in (b"", b"\0"):
            return self.finish("full", password == "", key_requested=False)
        return self.full_authentication(response, password, key_request=b"\x01")

    def full_authentication(self, answer: bytes, password: str | None, key_request: bytes) -> bool:
        key_requested = False
        if self.in_tls:
            given = answer[:-1] if answer.endswith(b"\0") else answer  # the password in clear, inside TLS
        else:
            if answer == key_request:
                key_requested = True
                self.send(b"\x01" + self.server.public_pem)
                answer = self.read()
            given = self._decrypt(answer)
        granted = password is not None and given == password.encode()
        if granted and self.server.plugin == "caching_sha2_password":
            self.server.remember(self.user)
        return self.finish("full", granted, key_requested)

    def _decrypt(self, answer: bytes) -> bytes | None:
        """The password in an RSA answer, or None when it is not one (a password sent in clear, say)."""
        try:
            plain = self.server.rsa_key.decrypt(answer, OAEP)
        except ValueError:
            return None
        unmasked = bytes(b ^ self.nonce[i % len(self.nonce)] for i, b in enumerate(plain))
        return unmasked[:-1] if unmasked.endswith(b"\0") else None

    def finish(self, method: str, granted: bool, key_requested: bool) -> bool:
        login = Login(self.user, method if granted else "denied", self.in_tls, key_requested)
        with self.server._lock:
            self.server.logins.append(login)
        if granted:
            self.ok()
        else:
            self.error(1045, "28000", f"Access denied for user '{self.user}'@'localhost' (using password: YES)")
        return granted

    # -- command phase -------------------------------------------------------------------

    def command(self) -> bool:
        data = self.read()
        if data[0] == COM_QUIT:
            return False
        if data[0] in (COM_PING, COM_INIT_DB):
            self.ok()
        elif data[0] == COM_QUERY:
            self.query(data[1:].decode().strip().rstrip(";").strip())
        else:
            self.error(1047, "08S01", f"Unknown command {data[0]}")
        return True

    def query(self, sql: str) -> None:
        upper = " ".join(sql.upper().split())
        tls = self.sock.cipher() if isinstance(self.sock, ssl.SSLSocket) else None
        if upper.startswith("SET "):
            if upper.startswith("SET AUTOCOMMIT"):
                on = upper.rsplit("=", 1)[-1].strip() in ("1", "ON", "TRUE")
                self.status = self.status | SERVER_STATUS_AUTOCOMMIT if on else self.status & ~SERVER_STATUS_AUTOCOMMIT
            self.ok()
        elif upper == "SELECT 1":
            self.rows([("1", TYPE_LONGLONG)], [b"1"])
        elif upper == "SELECT VERSION()":
            self.rows([("VERSION()", TYPE_VAR_STRING)], [self.server.version.encode()])
        elif upper == "SELECT CURRENT_USER()":
            self.rows([("CURRENT_USER()", TYPE_VAR_STRING)], [f"{self.user}@%".encode()])
        elif upper in ("SHOW STATUS LIKE 'SSL_CIPHER'", "SHOW STATUS LIKE 'SSL_VERSION'"):
            name = "Ssl_cipher" if upper.endswith("CIPHER'") else "Ssl_version"
            value = (tls[0] if name == "Ssl_cipher" else tls[1]) if tls else ""
            self.rows([("Variable_name", TYPE_VAR_STRING), ("Value", TYPE_VAR_STRING)],
                      [name.encode(), value.encode()])
        else:
            self.error(1064, "42000", f"the authentication test server does not run {sql!r}")

    def rows(self, columns: list[tuple[str, int]], row: list[bytes]) -> None:
        self.send(lenenc_int(len(columns)))
        for name, kind in columns:
            charset = BINARY if kind == TYPE_LONGLONG else UTF8MB4_GENERAL_CI
            self.send(b"".join(lenenc_str(s) for s in (b"def", b"", b"", b"", name.encode(), name.encode()))
                      + b"\x0c" + struct.pack("<HIBHB", charset, 255, kind, 0, 0) + b"\0\0")
        self.eof()
        self.send(b"".join(lenenc_str(v) for v in row))
        self.eof()


class Authority:
    """A certificate authority of the tests' own: its certificate at ``path`` (what ``tls.ca`` names), and
    the certificates it signs (EC P-256 keys: quick to make, and both OpenSSL ends take them)."""

    def __init__(self, folder: Path, name: str) -> None:
        self.folder = folder
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        public = self.key.public_key()
        self.cert = (self._builder(subject, subject, public)
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                                  key_encipherment=False, data_encipherment=False, key_agreement=False,
                                                  key_cert_sign=True, crl_sign=True, encipher_only=False,
                                                  decipher_only=False), critical=True)
                     .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
                     .sign(self.key, hashes.SHA256()))
        self.path = folder / f"{name}.pem"
        self.path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    @staticmethod
    def _builder(subject: x509.Name, issuer: x509.Name, public: object) -> x509.CertificateBuilder:
        now = datetime.datetime.now(datetime.UTC)
        return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
                .public_key(public).serial_number(x509.random_serial_number())  # type: ignore[arg-type]
                .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=30)))

    def issue(self, name: str, dns: tuple[str, ...] = (), ips: tuple[str, ...] = (),
              client: bool = False) -> tuple[Path, Path]:
        """A certificate for ``name`` (a server's for these DNS names and addresses, or a client's) and its
        key, as PEM files."""
        key = ec.generate_private_key(ec.SECP256R1())
        names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        builder = (self._builder(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]), self.cert.subject,
                                 key.public_key())
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH if client
                                                         else ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                                  critical=False))
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        cert_path, key_path = self.folder / f"{name}.crt", self.folder / f"{name}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        return cert_path, key_path
