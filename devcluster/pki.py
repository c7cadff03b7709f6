"""A throwaway certificate authority for the dev control plane.

Everything is generated in memory with `cryptography`; nothing here is meant to
protect real data. Certificates are PEM text (str) so they can be embedded in
kubeconfigs, authentication configs and database rows without re-encoding.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Long enough for a demo that runs for days; short enough that nobody mistakes
# these for real certificates.
_VALIDITY = datetime.timedelta(days=30)
# Tolerates clocks that disagree by a little (VMs, containers).
_BACKDATE = datetime.timedelta(hours=1)


@dataclass(frozen=True)
class KeyPair:
    cert_pem: str
    key_pem: str


def _new_ec_key() -> ec.EllipticCurvePrivateKey:
    # P-256 keys are generated in microseconds, unlike RSA, which keeps start-up fast.
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def _cert_pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


def _subject_alt_names(hostnames: list[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for host in hostnames:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            entries.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(entries)


class CertificateAuthority:
    """A self-signed CA that issues serving and client certificates."""

    def __init__(self, common_name: str = "berth-devcluster-ca") -> None:
        self._key = _new_ec_key()
        now = datetime.datetime.now(datetime.UTC)
        subject = _name(common_name)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _BACKDATE)
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self.cert_pem: str = _cert_pem(self._cert)

    def issue_serving_cert(self, hostnames: list[str]) -> tuple[str, str]:
        """A TLS server certificate for `hostnames` (DNS names or IP literals): (cert_pem, key_pem)."""
        if not hostnames:
            raise ValueError("a serving certificate needs at least one hostname")
        pair = self._issue(_name(hostnames[0]), ExtendedKeyUsageOID.SERVER_AUTH, _subject_alt_names(hostnames))
        return pair.cert_pem, pair.key_pem

    def issue_client_cert(self, common_name: str, organizations: tuple[str, ...] = ()) -> tuple[str, str]:
        """A TLS client certificate; Kubernetes reads CN as the user name and O as groups."""
        pair = self._issue(_name(common_name, organizations), ExtendedKeyUsageOID.CLIENT_AUTH, None)
        return pair.cert_pem, pair.key_pem

    def issue_peer_cert(self, hostnames: list[str]) -> tuple[str, str]:
        """A certificate usable both ways, as etcd peers and etcd clients need."""
        pair = self._issue(
            _name(hostnames[0]),
            (ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH),
            _subject_alt_names(hostnames),
        )
        return pair.cert_pem, pair.key_pem

    def _issue(
        self,
        subject: x509.Name,
        usages: x509.ObjectIdentifier | tuple[x509.ObjectIdentifier, ...],
        sans: x509.SubjectAlternativeName | None,
    ) -> KeyPair:
        key = _new_ec_key()
        now = datetime.datetime.now(datetime.UTC)
        usage_list = list(usages) if isinstance(usages, tuple) else [usages]
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _BACKDATE)
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_encipherment=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    content_commitment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage(usage_list), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), critical=False)
        )
        if sans is not None:
            builder = builder.add_extension(sans, critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return KeyPair(cert_pem=_cert_pem(cert), key_pem=_key_pem(key))


def new_service_account_key() -> tuple[str, str]:
    """(private_pem, public_pem). RSA, not EC: RS256 is what every consumer of ServiceAccount tokens understands."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public_pem = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    return _key_pem(key), public_pem
