from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.auth.bearer import MALFORMED, MISSING, bearer_token, parse_bearer
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


def _outcome(read: object, header: str) -> str:
    try:
        return "token " + read(header)  # type: ignore[operator]
    except AuthenticationFailed as exc:
        return "401 " + exc.message


@given(st.text() | st.text().map(lambda rest: "Bearer " + rest))
def test_the_quick_path_reads_every_header_as_the_general_one(header: str) -> None:
    assert _outcome(bearer_token, header) == _outcome(parse_bearer, header)
