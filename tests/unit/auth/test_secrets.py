from __future__ import annotations

import hashlib

from gateway.auth.secrets import constant_time_equals, hash_secret, key_prefix, new_key_secret


def test_new_secrets_carry_the_scheme_and_256_bits() -> None:
    secrets = {new_key_secret() for _ in range(100)}
    assert len(secrets) == 100
    for secret in secrets:
        assert secret.startswith("sk-gw-")
        assert len(secret) == len("sk-gw-") + 43  # token_urlsafe(32): 43 base64url characters


def test_hash_is_the_sha256_hex_digest() -> None:
    assert hash_secret("sk-gw-abc") == hashlib.sha256(b"sk-gw-abc").hexdigest()
    assert len(hash_secret(new_key_secret())) == 64
    assert hash_secret("sk-gw-abc") != hash_secret("sk-gw-abd")


def test_prefix_is_the_first_twelve_characters() -> None:
    secret = new_key_secret()
    assert key_prefix(secret) == secret[:12]
    assert key_prefix(secret).startswith("sk-gw-")


def test_constant_time_equals() -> None:
    assert constant_time_equals("admin-secret", "admin-secret")
    assert not constant_time_equals("admin-secret", "admin-secreT")
    assert not constant_time_equals("admin-secret", "admin")
    assert constant_time_equals("ünïcode", "ünïcode")
