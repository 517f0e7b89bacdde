from __future__ import annotations

from gateway.auth.principal import Principal, intersect


def test_intersect_keeps_what_both_allow() -> None:
    assert intersect(None, None) is None
    assert intersect(["a", "b"], None) == {"a", "b"}
    assert intersect(None, ["b", "c"]) == {"b", "c"}
    assert intersect(["a", "b"], ["b", "c"]) == {"b"}
    assert intersect(["a"], ["c"]) == frozenset()


def test_expired_against_the_wall_clock() -> None:
    principal = Principal("key_1", "sk-gw-abcdef", "team_1", "t", expires_at=1000.0)
    assert not principal.expired(999.9)
    assert principal.expired(1000.0)
    assert not Principal("key_1", "sk-gw-abcdef", "team_1", "t").expired(1e12)
