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
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

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


def load_ca(confdir: Path):
    """The CA in force for the cage (the one `install_ca` wrote at its first start): its key
    and certificate, from the confdir's key + certificate file."""
    data = (confdir / CA_FILE).read_bytes()
    key = serialization.load_pem_private_key(data, password=None)
    cert = x509.load_pem_x509_certificate(data)
    return key, cert


def make_leaf(ca_key, ca_cert, host: str, days: int = 30) -> bytes:
    """A server certificate for `host`, signed by the cage's CA, with a key of its own (never
    the CA's): the key and the certificate as one PEM, for `ssl.SSLContext.load_cert_chain`.
    The mail relays (gateway/relays) show it to the cage; mitmproxy makes its own."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return (key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption())
            + cert.public_bytes(serialization.Encoding.PEM))
