"""Console session tokens: what a token proves, and everything that makes one worthless."""

from __future__ import annotations

import base64

import pytest

from gateway.console.auth.tokens import SessionClaims, TokenSigner, console_secret

NOW = 1_800_000_000.0
SIGNER = TokenSigner(b"s" * 32)


def test_a_team_token_names_its_key_by_hash_and_expires() -> None:
    token = SIGNER.issue(now=NOW, ttl_s=60, key_hash="ab" * 32)
    claims = SIGNER.verify(token, now=NOW + 59)
    assert claims is not None and claims.key_hash == "ab" * 32 and not claims.admin
    assert SIGNER.verify(token, now=NOW + 60) is None


def test_an_admin_token_carries_a_mark_of_the_admin_key_not_the_key() -> None:
    token = SIGNER.issue(now=NOW, ttl_s=60, admin_key="the-admin-key")
    claims = SIGNER.verify(token, now=NOW)
    assert claims is not None and claims.admin
    assert claims.admin_mark == SIGNER.admin_mark("the-admin-key") != SIGNER.admin_mark("another-key")
    payload = base64.urlsafe_b64decode(token.split(".")[0] + "==")
    assert b"the-admin-key" not in payload and b"the-admin-key" not in token.encode()


@pytest.mark.parametrize(
    "forge",
    [
        lambda t: t[:-2] + ("AA" if not t.endswith("AA") else "BB"),  # another signature
        lambda t: (
            "eyJzaWQiOiJ4IiwiZXhwIjo5OTk5OTk5OTk5LCJhZG1pbl9tYXJrIjoieCJ9." + t.split(".")[1]
        ),  # another payload
        lambda t: t.split(".")[0],  # no signature
        lambda t: "",
        lambda t: "not.a-token",
    ],
)
def test_a_changed_or_made_up_token_is_refused(forge: object) -> None:
    token = SIGNER.issue(now=NOW, ttl_s=60, key_hash="cd" * 32)
    assert SIGNER.verify(forge(token), now=NOW) is None  # type: ignore[operator]


def test_a_token_of_another_secret_is_refused() -> None:
    token = TokenSigner(b"other" * 8).issue(now=NOW, ttl_s=60, key_hash="ef" * 32)
    assert SIGNER.verify(token, now=NOW) is None


def test_each_session_has_its_own_id_and_csrf_token() -> None:
    first = SIGNER.verify(SIGNER.issue(now=NOW, ttl_s=60, key_hash="01" * 32), now=NOW)
    second = SIGNER.verify(SIGNER.issue(now=NOW, ttl_s=60, key_hash="01" * 32), now=NOW)
    assert first is not None and second is not None and first.sid != second.sid
    assert SIGNER.csrf_token(first) != SIGNER.csrf_token(second)
    assert SIGNER.csrf_token(first) != TokenSigner(b"x" * 32).csrf_token(first)


def test_claims_must_name_exactly_one_of_a_key_and_the_admin() -> None:
    both = SessionClaims(sid="s", exp=int(NOW) + 60, key_hash="aa", admin_mark="bb")
    import msgspec

    payload = base64.urlsafe_b64encode(msgspec.json.encode(both)).decode().rstrip("=")
    token = f"{payload}.{SIGNER._mac(payload.encode())}"
    assert SIGNER.verify(token, now=NOW) is None


def test_the_secret_is_the_configured_one_else_derived_from_the_admin_key() -> None:
    assert console_secret("shared", "admin") == b"shared"
    derived = console_secret(None, "admin")
    assert derived is not None and derived != b"admin" and derived == console_secret(None, "admin")
    assert derived != console_secret(None, "another admin key")
    assert console_secret(None, None) is None
