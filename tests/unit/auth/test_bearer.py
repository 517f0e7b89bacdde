from __future__ import annotations

import pytest

from gateway.auth.bearer import MALFORMED, MISSING, bearer_token
from gateway.errors import AuthenticationFailed


@pytest.mark.parametrize("header", ["Bearer sk-gw-abc", "bearer sk-gw-abc", "  Bearer   sk-gw-abc  "])
def test_reads_the_token(header: str) -> None:
    assert bearer_token(header) == "sk-gw-abc"


@pytest.mark.parametrize("header", [None, "", "   "])
def test_missing_header_is_401(header: str | None) -> None:
    with pytest.raises(AuthenticationFailed) as caught:
        bearer_token(header)
    assert caught.value.status == 401
    assert caught.value.message == MISSING


@pytest.mark.parametrize(
    "header", ["sk-gw-abc", "Basic dXNlcjpwdw==", "Bearer", "Bearer a b", "Token sk-gw-abc"]
)
def test_malformed_header_is_401(header: str) -> None:
    with pytest.raises(AuthenticationFailed) as caught:
        bearer_token(header)
    assert caught.value.message == MALFORMED
