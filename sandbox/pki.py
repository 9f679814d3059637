"""The sandbox's certificates: a CA, serving and client certificates issued from it, and the
key pair that signs service-account tokens (files under the control plane's work folder)."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"  # the only address the sandbox's servers listen on


# --- certificates -----------------------------------------------------------------------------
@dataclass
class Pki:
    dir: Path
    ca_cert: Path = field(init=False)
    ca_key: Path = field(init=False)

    def __post_init__(self) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self.dir.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "taugrid-e2e-ca")])
        now = dt.datetime.now(dt.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                critical=True,
            )
            .sign(key, _sha256())
        )
        self._ca = (cert, key)
        self.ca_cert = self._write_cert("ca", cert)
        self.ca_key = self._write_key("ca", key)

    def _write_cert(self, stem: str, cert: Any) -> Path:
        from cryptography.hazmat.primitives import serialization

        p = self.dir / f"{stem}.crt"
        p.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return p

    def _write_key(self, stem: str, key: Any) -> Path:
        from cryptography.hazmat.primitives import serialization

        p = self.dir / f"{stem}.key"
        p.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        p.chmod(0o600)
        return p

    def issue(
        self, stem: str, cn: str, orgs: tuple[str, ...] = (), server: bool = False
    ) -> tuple[Path, Path]:
        from cryptography import x509
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        ca_cert, ca_key = self._ca
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
        now = dt.datetime.now(dt.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address(HOST))]
                ),
                critical=False,
            )
        cert = builder.sign(ca_key, _sha256())
        return self._write_cert(stem, cert), self._write_key(stem, key)

    def rsa_pair(self, stem: str) -> tuple[Path, Path]:
        """A key pair for signing service-account tokens."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        priv = self._write_key(stem, key)
        pub = self.dir / f"{stem}.pub"
        pub.write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        return pub, priv


def _sha256() -> Any:
    from cryptography.hazmat.primitives import hashes

    return hashes.SHA256()
