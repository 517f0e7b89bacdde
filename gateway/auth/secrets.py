"""API key secrets: generation, the hash that is stored instead of them, and constant-time comparison."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

KEY_SCHEME = "sk-gw-"
PREFIX_LENGTH = 12
_TEAM_KEY = re.compile(rf"{KEY_SCHEME}[A-Za-z0-9_-]{{43}}")  # what new_key_secret makes


def new_key_secret() -> str:
    """A fresh team key: the scheme marker plus 256 bits from the OS CSPRNG."""
    return KEY_SCHEME + secrets.token_urlsafe(32)


def looks_like_team_key(secret: str) -> bool:
    """Whether `secret` has the shape of a key `new_key_secret` makes (not whether it is one)."""
    return _TEAM_KEY.fullmatch(secret) is not None


def hash_secret(secret: str) -> str:
    """The sha256 hex digest stored in `api_keys.key_hash`.

    A slow KDF (bcrypt, argon2) exists to stop brute force of low-entropy passwords. Our keys
    carry 256 random bits, so a single fast hash is already beyond brute force, and it lets us
    look keys up by hash on every request without burning CPU.
    """
    return hashlib.sha256(secret.encode()).hexdigest()


def key_prefix(secret: str) -> str:
    """The first characters of a key: safe to show in lists and logs, useless to an attacker."""
    return secret[:PREFIX_LENGTH]


def constant_time_equals(a: str, b: str) -> bool:
    """Compare two secrets without leaking, through timing, how many leading characters match."""
    return hmac.compare_digest(a.encode(), b.encode())
