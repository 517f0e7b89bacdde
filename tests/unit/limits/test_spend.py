"""Money as whole 1e-10 USD units and calendar months in UTC."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from gateway.limits.spend import from_units, month_bounds, month_of, spend_key, to_units


@pytest.mark.parametrize(
    ("amount", "units"),
    [
        ("0", 0),
        ("1", 10**10),
        ("0.0000000001", 1),
        ("0.00000000015", 2),
        ("0.00000000014999", 1),
        ("12.5", 125 * 10**9),
    ],
)
def test_units_round_half_up_at_the_records_scale(amount: str, units: int) -> None:
    assert to_units(Decimal(amount)) == units


def test_units_convert_back_exactly() -> None:
    assert from_units(to_units(Decimal("1234567.0000000009"))) == Decimal("1234567.0000000009")


def test_december_ends_in_january() -> None:
    start, end = month_bounds(datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp())

    assert start == datetime(2026, 12, 1, tzinfo=UTC)
    assert end == datetime(2027, 1, 1, tzinfo=UTC)


def test_counter_names_carry_the_month() -> None:
    now = datetime(2026, 11, 30, 23, 0, tzinfo=UTC).timestamp()

    assert spend_key("team", "team_x", month_of(now)) == "gw:{team:team_x}:spend:team:team_x:2026-11"


def test_a_keys_counter_shares_its_teams_hash_tag() -> None:
    # One Cluster slot for both: an admission's script touches the key's and the team's counters.
    assert spend_key("key", "key_x", "2026-11", "team_x") == "gw:{team:team_x}:spend:key:key_x:2026-11"
    with pytest.raises(ValueError, match="with its team"):
        spend_key("key", "key_x", "2026-11")
