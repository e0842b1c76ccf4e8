"""TLS for the Redis tests: a throwaway CA with server and client certificates, made with the
``openssl`` command line (the ``cryptography`` package is not a dependency), and a redis-server
that speaks only TLS and, as Redis does by default, requires client certificates.

Tests fail, not skip, when ``openssl`` is missing, as they do without redis-server.
"""
import dataclasses
import os
import shutil
import socket
import ssl
import subprocess
import urllib.parse

import pytest

from tests.redis_server import RedisServer

# P-256 keys: made in milliseconds, where RSA keys take a noticeable part of a second each.
_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


@dataclasses.dataclass(frozen=True)
class Certificates:
    """Paths of PEM files: a CA, a server and a client certificate it signed (with their keys),
    and another CA that signed nothing here."""

    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    wrong_ca: str


def make_certificates(directory: str) -> Certificates:
    """Certificates valid for two days; the server's names ``localhost`` and ``127.0.0.1``."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("openssl was not found on PATH; the TLS tests make their certificates with it "
                    "(Debian/Ubuntu: apt-get install openssl)")

    def path(name: str) -> str:
        return os.path.join(directory, name)

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], check=True, capture_output=True, timeout=60)

    for name in ("ca", "wrong_ca"):
        run("req", "-x509", *_KEY, "-keyout", path(f"{name}.key"), "-out", path(f"{name}.pem"),
            "-days", "2", "-subj", f"/CN=async_plotter test {name}", "-addext",
            "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    leaves = {
        "server": "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        "client": "extendedKeyUsage=clientAuth\n",
    }
    for name, extensions in leaves.items():
        with open(path(f"{name}.ext"), "w") as handle:
            handle.write("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                         "authorityKeyIdentifier=keyid\n" + extensions)
        run("req", *_KEY, "-keyout", path(f"{name}.key"), "-out", path(f"{name}.csr"), "-subj",
            f"/CN={'localhost' if name == 'server' else 'async_plotter test client'}")
        run("x509", "-req", "-in", path(f"{name}.csr"), "-CA", path("ca.pem"), "-CAkey",
            path("ca.key"), "-CAcreateserial", "-out", path(f"{name}.pem"), "-days", "2",
            "-extfile", path(f"{name}.ext"))
    return Certificates(path("ca.pem"), path("server.pem"), path("server.key"), path("client.pem"),
                        path("client.key"), path("wrong_ca.pem"))


class TlsRedisServer(RedisServer):
    """A redis-server listening only for TLS on ``port``, requiring a client certificate."""

    def __init__(self, executable: str, certificates: Certificates) -> None:
        self.certificates = certificates
        super().__init__(executable)
        self.extra_args = [
            "--port", "0", "--tls-port",
            str(self.port), "--tls-cert-file", certificates.server_cert, "--tls-key-file",
            certificates.server_key, "--tls-ca-cert-file", certificates.ca
        ]

    def tls_url(self, ca: str = None, client_certificate: bool = True) -> str:
        """``rediss://`` with the options a client needs: the CA that signed the server's
        certificate (``ca``, default the right one) and the client's certificate."""
        options = {"ssl_ca_certs": ca or self.certificates.ca}
        if client_certificate:
            options.update(ssl_certfile=self.certificates.client_cert,
                           ssl_keyfile=self.certificates.client_key)
        query = urllib.parse.urlencode(options, safe="/")
        return f"rediss://127.0.0.1:{self.port}/0?{query}"

    @property
    def url(self) -> str:
        return self.tls_url()

    def _answers(self) -> bool:
        context = ssl.create_default_context(cafile=self.certificates.ca)
        context.load_cert_chain(self.certificates.client_cert, self.certificates.client_key)
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as raw:
                with context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
                    sock.sendall(b"PING\r\n")
                    reply = sock.recv(64)
        except OSError:
            return False
        return reply.startswith(b"+PONG")
