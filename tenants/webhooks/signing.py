"""Standard Webhooks signatures (https://www.standardwebhooks.com/, symmetric scheme ``v1``).

The secret is ``whsec_`` followed by base64 of 24 to 64 random bytes; the HMAC-SHA256 key is those bytes.
Each attempt signs ``{webhook-id}.{webhook-timestamp}.{body}``, so a receiver that checks the timestamp
and remembers ids refuses replays (docs/webhooks.md).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32
SECRET_MIN_BYTES, SECRET_MAX_BYTES = 24, 64
USER_AGENT = "Berth-Webhooks/1"


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def secret_error(secret: str) -> str:
    """Why ``secret`` cannot sign webhooks, or ''."""
    try:
        key_of(secret)
    except ValueError as exc:
        return str(exc)
    return ""


def key_of(secret: str) -> bytes:
    if not secret.startswith(SECRET_PREFIX):
        raise ValueError(f"A signing secret starts with {SECRET_PREFIX} (leave it empty to have one generated).")
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"After {SECRET_PREFIX}, a signing secret is base64.") from None
    if not SECRET_MIN_BYTES <= len(key) <= SECRET_MAX_BYTES:
        raise ValueError(f"A signing secret holds {SECRET_MIN_BYTES} to {SECRET_MAX_BYTES} bytes.")
    return key


def signature(*, secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(key_of(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def headers(
    *, secret: str, message_id: str, timestamp: int, body: bytes, event: str, delivery_id: str, sequence: int
) -> dict[str, str]:
    """The headers of one attempt: Standard Webhooks' three, and Berth's own for routing and logs."""
    return {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(secret=secret, message_id=message_id, timestamp=timestamp, body=body),
        "Berth-Event": event,
        "Berth-Delivery": delivery_id,
        "Berth-Sequence": str(sequence),
    }
