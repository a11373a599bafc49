"""A self-signed certificate for a local server, made in the test session.

``LocalDetermined(tls=True)`` serves HTTPS with one, as a master with
``security.tls`` does; a boot script hands its PEM to the agent as the master cert.
The key is RSA 2048 (every TLS client takes it); the certificate names 127.0.0.1 and
``localhost`` and lasts a day. Weaker than a real master's TLS: the server accepts SHA-1
handshake signatures, for the agent stand-in's busybox client.
"""

from __future__ import annotations

import ipaddress
import ssl
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import NamedTuple

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID


class Certificate(NamedTuple):
    """A certificate and its private key, both PEM."""

    cert_pem: str
    key_pem: str

    def server_context(self) -> ssl.SSLContext:
        """A server-side TLS context that presents this certificate."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        # OpenSSL's security level 0: the agent stand-in's TLS client (busybox wget's own)
        # only signs key exchanges with SHA-1, which levels 1 and up refuse.
        context.set_ciphers("DEFAULT:@SECLEVEL=0")
        with tempfile.TemporaryDirectory(prefix="dynagent-tls-") as directory:
            cert, key = Path(directory) / "cert.pem", Path(directory) / "key.pem"
            cert.write_text(self.cert_pem)
            key.write_text(self.key_pem)
            context.load_cert_chain(cert, key)  # it reads files only
        return context


def self_signed(common_name: str = "local-determined") -> Certificate:
    """A new self-signed certificate for 127.0.0.1 and localhost."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.now(UTC)
    names = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return Certificate(cert.public_bytes(serialization.Encoding.PEM).decode(), key_pem.decode())
