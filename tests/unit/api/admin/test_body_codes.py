"""A body that fits no schema gets OpenAI's code for the way it does not fit, and its `param`."""

from __future__ import annotations

import pytest

from gateway.api.admin.body import decode_body
from gateway.errors import InvalidRequest
from gateway.schemas.admin import TeamCreate


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        (b"{}", "missing_required_parameter", "name"),
        (b'{"name": "t", "bogus": 1}', "unknown_parameter", "bogus"),
        (b'{"name": 7}', "invalid_type", "name"),
        (b'{"name": "t", "rpm_limit": -1}', "invalid_value", "rpm_limit"),
    ],
)
def test_a_schema_error_has_a_code(body: bytes, code: str, param: str) -> None:
    with pytest.raises(InvalidRequest) as raised:
        decode_body(body, TeamCreate)
    assert (raised.value.code, raised.value.param) == (code, param)
