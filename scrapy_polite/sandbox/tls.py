"""A self-signed certificate for the sandbox's HTTPS sites (reached through CONNECT tunnels)."""

from __future__ import annotations


def make_self_signed(address: str) -> tuple[bytes, bytes]:
    """PEM cert and key for *address* (IP SAN), for TLS sites reached via CONNECT."""
    import datetime
    import ipaddress

    try:
        import cryptography  # noqa: F401
    except ImportError:
        raise RuntimeError(
            "the sandbox's HTTPS sites need the cryptography package: pip install 'scrapy-polite[sandbox]'"
        ) from None
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, address)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(address))]), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert_pem, key_pem
