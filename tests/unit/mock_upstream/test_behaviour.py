from __future__ import annotations

import pytest

from mock_upstream.behaviour import (
    BehaviourError,
    MockBehaviour,
    decode_behaviour,
    header_overrides,
    with_overrides,
)


def test_overrides_change_only_the_fields_they_name() -> None:
    base = MockBehaviour(latency_ms=5, completion_tokens=3)
    merged = with_overrides(base, {"completion_tokens": 7})
    assert merged.latency_ms == 5
    assert merged.completion_tokens == 7


def test_no_overrides_keep_the_base() -> None:
    base = MockBehaviour(chunks=2)
    assert with_overrides(base, None) is base
    assert with_overrides(base, {}) is base


@pytest.mark.parametrize(
    "overrides",
    [{"fail_rate": 1.5}, {"chunks": 0}, {"no_such_field": 1}, {"fail_status": 200}, ["not", "an", "object"]],
)
def test_invalid_overrides_are_refused(overrides: object) -> None:
    with pytest.raises(BehaviourError):
        with_overrides(MockBehaviour(), overrides)


def test_decode_replaces_the_whole_behaviour() -> None:
    assert decode_behaviour(b'{"hang": true}') == MockBehaviour(hang=True)
    assert decode_behaviour(b"") == MockBehaviour()
    with pytest.raises(BehaviourError):
        decode_behaviour(b"{nope")


def test_header_overrides_parse_json() -> None:
    assert header_overrides('{"garbage": true}') == {"garbage": True}
    assert header_overrides(None) is None
    with pytest.raises(BehaviourError):
        header_overrides("garbage")
