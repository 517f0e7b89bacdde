"""Which stored answer a keyed request names, and what a repeat of it must match.

The client's key is scoped by its team (another team's identical key is another slot) and stored
only as a digest; the request is fingerprinted by the digest of its method, path and raw body
bytes, so a repeat must be the very same request, byte for byte (an upload, whose multipart
boundary changes with each retry, by its purpose, filename and file digest instead).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from gateway.errors import InvalidRequest

IDEMPOTENCY_HEADER = "idempotency-key"  # as the front reads header names: lower-case
MAX_KEY_CHARS = 255  # Stripe's bound; the SDKs send a UUID (36 characters)


@dataclass(frozen=True, slots=True)
class IdempotentRequest:
    slot: str  # the team's stored answer for this key: `<team id>:<digest of the key>`
    fingerprint: str  # digest of method, path and body: what a repeat must match


def idempotent_request(team_id: str, key: str, method: str, path: str, body: bytes) -> IdempotentRequest:
    """The slot and fingerprint of a request sent with `Idempotency-Key: key`; a 400 for a key that
    is empty, too long or not printable ASCII."""
    if not 0 < len(key) <= MAX_KEY_CHARS or not key.isascii() or not key.isprintable():
        raise InvalidRequest(
            f"The Idempotency-Key header must be 1 to {MAX_KEY_CHARS} printable ASCII characters",
            param="Idempotency-Key",
            code="invalid_idempotency_key",
        )
    digest = hashlib.sha256(key.encode("ascii")).hexdigest()
    request = hashlib.sha256(method.encode("ascii") + b" " + path.encode("latin-1") + b"\n")
    request.update(body)
    return IdempotentRequest(f"{team_id}:{digest}", request.hexdigest())
