from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from gateway.errors import InvalidRequest
from gateway.metering.reports.usage import (
    UsageRow,
    decode_cursor,
    encode_cursor,
    parse_group_by,
    report_csv,
    split_range,
)


def test_group_by_is_parsed_in_order_without_repeats() -> None:
    assert parse_group_by(" team, day ,team,,batch") == ("team", "day", "batch")
    assert parse_group_by(None) == ()


def test_unknown_group_by_is_a_bad_request() -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse_group_by("team,colour")
    assert refused.value.param == "group_by"
    assert "colour" in refused.value.message
    assert "region" in refused.value.message


def test_cursor_round_trips_to_utc() -> None:
    moment = datetime(2026, 3, 1, 1, 30, 0, 123_456, tzinfo=timezone(timedelta(hours=1)))
    cursor = encode_cursor(moment, "req_1")
    assert "=" not in cursor
    assert decode_cursor(cursor) == (datetime(2026, 3, 1, 0, 30, 0, 123_456, tzinfo=UTC), "req_1")


@pytest.mark.parametrize("cursor", ["", "!!!", "bm90IGpzb24", "WzEsMl0"])
def test_a_forged_cursor_is_a_bad_request(cursor: str) -> None:
    with pytest.raises(InvalidRequest):
        decode_cursor(cursor)


def test_csv_has_the_group_columns_asked_for_and_exact_money() -> None:
    rows = [
        UsageRow(
            team_id="team_a", day="2026-03-01", requests=2, prompt_tokens=10, cost=Decimal("0.0000000001")
        ),
        UsageRow(
            team_id="team_b", day="2026-03-01", requests=1, cost=Decimal("12.5000000000"), saving=Decimal(1)
        ),
    ]

    text = report_csv(rows, ("team", "day"))

    assert text.splitlines() == [
        "team_id,day,requests,prompt_tokens,completion_tokens,cached_tokens,cache_write_tokens,cost,saving",
        "team_a,2026-03-01,2,10,0,0,0,0.0000000001,0",
        "team_b,2026-03-01,1,0,0,0,0,12.5,1",
    ]


def test_csv_without_group_by_lists_every_group_column() -> None:
    header = report_csv([UsageRow()]).splitlines()[0]
    assert header.startswith("team_id,key_id,model,provider,region,batch_id,day,service_tier,requests")


def _at(day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(2026, 3, day, hour, minute, tzinfo=UTC)


def test_a_range_from_midnight_to_midnight_is_whole_days_only() -> None:
    assert split_range(_at(1), _at(31)) == ((date(2026, 3, 1), date(2026, 3, 31)), [])
    assert split_range(None, None) == ((None, None), [])
    assert split_range(None, _at(2)) == ((None, date(2026, 3, 2)), [])


def test_cut_days_are_read_from_the_records_either_side_of_the_whole_ones() -> None:
    start, end = _at(1, 12), _at(4, 6, 30)
    assert split_range(start, end) == (
        (date(2026, 3, 2), date(2026, 3, 4)),
        [(start, _at(2)), (_at(4), end)],
    )
    assert split_range(start, None) == ((date(2026, 3, 2), None), [(start, _at(2))])


def test_a_range_without_a_whole_day_is_read_from_the_records_alone() -> None:
    start, end = _at(1, 0, 1), _at(2, 0, 0)
    assert split_range(start, end) == (None, [(start, end)])
    assert split_range(_at(1, 1), _at(1, 2)) == (None, [(_at(1, 1), _at(1, 2))])
    assert split_range(_at(5), _at(1)) == (None, [(_at(5), _at(1))])  # reversed: nothing in it
    last = datetime(9999, 12, 31, 12, tzinfo=UTC)  # no midnight follows it
    assert split_range(last, None) == (None, [(last, None)])


def test_days_are_utc_days() -> None:
    paris = timezone(timedelta(hours=1))
    start = datetime(2026, 3, 2, 1, 0, tzinfo=paris)  # midnight UTC
    assert split_range(start, datetime(2026, 3, 3, 12, 0, tzinfo=paris)) == (
        (date(2026, 3, 2), date(2026, 3, 3)),
        [(_at(3), _at(3, 11))],
    )
