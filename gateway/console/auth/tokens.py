"""Console session tokens: a signed, expiring statement of who signed in, held in the session cookie.

A token is `<payload>.<signature>`: the payload is JSON (base64url) and the signature its
HMAC-SHA256 under the console secret, which every gateway process shares (`GATEWAY_CONSOLE_SECRET`,
or derived from the admin key), so any process on any host accepts a token another issued and no
session store is needed. A token never holds a key: a team session names its key by the hash the
database stores, and an admin session carries a mark of the admin key, so a new admin key ends the
old sessions. Each token has a random session id, which its CSRF token and its sign-out are bound to.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from dataclasses import dataclass

import msgspec

from gateway.auth.secrets import constant_time_equals

# The derivation's label: a secret derived from the admin key is good for nothing else.
DERIVATION_LABEL = b"gateway console session secret v1"


class SessionClaims(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    sid: str  # the session's random id
    exp: int  # unix seconds; the token is refused from then on
    key_hash: str | None = None  # a team session: its key, as api_keys.key_hash holds it
    admin_mark: str | None = None  # an admin session: a mark of the admin key it signed in with

    @property
    def admin(self) -> bool:
        return self.admin_mark is not None


def console_secret(explicit: str | None, admin_key: str | None) -> bytes | None:
    """The signing secret: `GATEWAY_CONSOLE_SECRET`, else HMAC(admin key, label); None without either."""
    if explicit:
        return explicit.encode()
    if admin_key:
        return hmac.new(admin_key.encode(), DERIVATION_LABEL, hashlib.sha256).digest()
    return None


@dataclass(frozen=True, slots=True)
class TokenSigner:
    secret: bytes

    def admin_mark(self, admin_key: str) -> str:
        return self._mac(b"admin-key:" + admin_key.encode())

    def issue(
        self, *, now: float, ttl_s: float, key_hash: str | None = None, admin_key: str | None = None
    ) -> str:
        """A token for a team key (by its hash) or for the admin key, valid for `ttl_s`."""
        claims = SessionClaims(
            sid=secrets.token_urlsafe(18),
            exp=int(now + ttl_s),
            key_hash=key_hash,
            admin_mark=None if admin_key is None else self.admin_mark(admin_key),
        )
        payload = _b64(msgspec.json.encode(claims))
        return f"{payload}.{self._mac(payload.encode())}"

    def verify(self, token: str, *, now: float) -> SessionClaims | None:
        """The claims of a token this secret signed and that has not expired; None for any other."""
        payload, dot, signature = token.partition(".")
        if not dot or not constant_time_equals(signature, self._mac(payload.encode())):
            return None
        try:
            claims = msgspec.json.decode(_unb64(payload), type=SessionClaims)
        except (binascii.Error, ValueError, msgspec.DecodeError):
            return None
        if now >= claims.exp or (claims.key_hash is None) == (claims.admin_mark is None):
            return None
        return claims

    def csrf_token(self, claims: SessionClaims) -> str:
        """The token every form of this session carries: bound to the session id, unguessable without
        the secret."""
        return self._mac(b"csrf:" + claims.sid.encode())

    def _mac(self, message: bytes) -> str:
        return _b64(hmac.new(self.secret, message, hashlib.sha256).digest())


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
