"""The usage benchmark's records and ranges: spread as it says, priced like the gateway prices."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

from bench.usage_scale.dataset import DAYS, Tenant, day_zero, events
from bench.usage_scale.queries import last_month

TENANTS = [Tenant(f"team_{n}", (f"key_{n}_a", f"key_{n}_b")) for n in range(5)]


def test_records_cover_every_day_in_time_order_and_are_the_same_each_run() -> None:
    start = day_zero(now=datetime(2026, 12, 2, 15, tzinfo=UTC).timestamp())
    made = list(events(9_000, start, TENANTS))

    assert made == list(events(9_000, start, TENANTS))
    assert datetime.fromtimestamp(start, UTC) == datetime(2026, 9, 4, tzinfo=UTC)  # 90 days to Dec 2
    moments = [e.created_at for e in made]
    assert moments == sorted(moments) and start <= moments[0] and moments[-1] < start + DAYS * 86_400
    days = Counter(int((m - start) // 86_400) for m in moments)
    assert sorted(days) == list(range(DAYS)) and max(days.values()) - min(days.values()) <= 1
    assert len({e.request_id for e in made}) == len(made)
    assert {e.team_id for e in made} == {t.team_id for t in TENANTS}
    keys = {t.team_id: t.key_ids for t in TENANTS}
    assert all(e.key_id in keys[e.team_id] for e in made)


def test_records_are_priced_and_cached_as_requests_are() -> None:
    made = list(events(2_000, day_zero(), TENANTS))

    for e in made:
        assert 0 <= e.cached_tokens <= e.prompt_tokens
        assert 0 <= e.cost <= e.uncached_cost
        assert e.cost.as_tuple().exponent >= -10  # the records' money scale
        assert (e.status == 200) == (e.prompt_tokens > 0)
    assert 0.2 < sum(e.batch_id is not None for e in made) / len(made) < 0.4
    assert any(e.cached_tokens for e in made) and len({e.model for e in made}) > 3


def test_last_month_is_the_previous_calendar_month_in_utc() -> None:
    assert last_month(datetime(2026, 1, 15, 3, tzinfo=UTC)) == (
        datetime(2025, 12, 1, tzinfo=UTC),
        datetime(2026, 1, 1, tzinfo=UTC),
    )
