"""The local test server of :mod:`localserver`, over TLS.

``GITHUB_TOKEN`` goes out only over https, so a test that wants to see the
token arrive (or not leak back) needs a real https server. The certificate is
made here with the ``openssl`` command (self-signed, for 127.0.0.1, 127.0.0.2
and localhost); the client trusts it because the test points
``SSL_CERT_FILE`` at it, which is how OpenSSL's default verify paths (and so
``ssl.create_default_context()``) are redirected. Nothing in the plugin knows
it is under test.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from localserver import LocalServer


@dataclass(frozen=True)
class Cert:
    cert: Path
    key: Path


def make_cert(folder: Path) -> Cert:
    """A self-signed certificate for the loopback names, or skip the test."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command is needed to make a certificate for the local https server")
    cert, key = folder / "cert.pem", folder / "key.pem"
    made = subprocess.run(
        [
            openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1,IP:127.0.0.2,DNS:localhost",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if made.returncode != 0:
        pytest.skip(f"openssl could not make a test certificate: {made.stderr.strip()[-200:]}")
    return Cert(cert, key)


class TlsServer(LocalServer):
    """A :class:`LocalServer` that speaks https. The handshake runs in the
    handler's thread (on its first read), so a client that never speaks holds
    up its own connection only, as with the plain server."""

    def __init__(self, cert: Cert, host: str = "127.0.0.1") -> None:
        super().__init__(host)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert.cert, cert.key)
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True, do_handshake_on_connect=False)

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"


# The fixtures (a test module imports these functions; the fixtures are
# named tls_cert and tls_server):


@pytest.fixture(scope="session", name="tls_cert")
def tls_cert_fixture(tmp_path_factory: pytest.TempPathFactory) -> Cert:
    return make_cert(tmp_path_factory.mktemp("tls"))


@pytest.fixture(name="tls_server")
def tls_server_fixture(tls_cert: Cert, monkeypatch: pytest.MonkeyPatch) -> Iterator[TlsServer]:
    """An https server on 127.0.0.1 that this process (and its children) trust."""
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_cert.cert))
    with TlsServer(tls_cert) as s:
        yield s
