"""The per-cage CA: an ECDSA P-256 key (made in a millisecond, unlike RSA) and a self-signed
certificate that may only sign leaf certificates. mitmproxy signs (and keys) the certificates it
shows the cage with it. The key never leaves the cage's state directory; only the certificate is
handed to the workload."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

CA_FILE = "mitmproxy-ca.pem"  # key + certificate, the name mitmproxy looks for in its confdir
CA_CERT_FILE = "mitmproxy-ca-cert.pem"


def make_ca(common_name: str = "agentcage cage CA", days: int = 825):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([
        x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "agentcage"),
    ])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=False, content_commitment=False,
                          key_encipherment=False, data_encipherment=False, key_agreement=False,
                          key_cert_sign=True, crl_sign=True, encipher_only=False,
                          decipher_only=False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                       critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def install_ca(confdir: Path, key, cert) -> bool:
    """Write the CA where mitmproxy looks for it unless the cage has one; True if written."""
    confdir.mkdir(mode=0o700, parents=True, exist_ok=True)
    if (confdir / CA_FILE).exists():
        return False
    pem_cert = cert.public_bytes(serialization.Encoding.PEM)
    pem_key = key.private_bytes(serialization.Encoding.PEM,
                                serialization.PrivateFormat.TraditionalOpenSSL,
                                serialization.NoEncryption())
    for name, data in ((CA_FILE, pem_key + pem_cert), (CA_CERT_FILE, pem_cert)):
        tmp = confdir / f".{name}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, confdir / name)
    return True
