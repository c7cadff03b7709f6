"""Secrets Berth must keep (a provider's refresh token) are sealed before they reach the database.

Fernet (AES-128-CBC with HMAC-SHA256) under BERTH_SECRETS_KEY, or a key derived from SECRET_KEY when
that is not set. A sealed value that cannot be opened (the key changed) is as good as none: the person
signs in again.
"""

from __future__ import annotations

import base64
import functools

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings


@functools.cache
def _fernet(secret: str) -> Fernet:
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"berth-sealing", info=b"v1").derive(secret.encode())
    return Fernet(base64.urlsafe_b64encode(key))


def _key() -> Fernet:
    return _fernet(settings.BERTH_SECRETS_KEY or settings.SECRET_KEY)


def seal(plaintext: str) -> str:
    return _key().encrypt(plaintext.encode()).decode() if plaintext else ""


def unseal(sealed: str) -> str | None:
    """The plaintext, or None when there is none or it cannot be opened with the current key."""
    if not sealed:
        return None
    try:
        return _key().decrypt(sealed.encode()).decode()
    except (InvalidToken, ValueError):
        return None
