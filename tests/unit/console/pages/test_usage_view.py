"""The usage page's figures from report rows: filters, daily series by group, totals and shares."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

from gateway.console.pages.usage_view import (
    MAX_SERIES,
    OTHER,
    TABLE_PAGE,
    UsageFilters,
    table_page,
    usage_view,
)
from gateway.errors import InvalidRequest
from gateway.metering.reports.usage import UsageRow

TODAY = date(2026, 3, 10)


def parse(**given: str | None) -> UsageFilters:
    fields: dict[str, str | None] = {
        "start": None,
        "end": None,
        "group": None,
        "team_id": None,
        "model": None,
    }
    return UsageFilters.parse(**(fields | given), today=TODAY)  # type: ignore[arg-type]


def test_the_default_is_the_last_thirty_days_grouped_by_day() -> None:
    filters = parse()
    assert (filters.first, filters.last, filters.group) == (date(2026, 2, 9), TODAY, "none")
    query = filters.query()
    assert query.start == datetime(2026, 2, 9, tzinfo=UTC) and query.end == datetime(2026, 3, 11, tzinfo=UTC)
    assert query.group_by == ("day",)


def test_a_grouping_and_filters_reach_the_report_query() -> None:
    query = parse(start="2026-03-01", end="2026-03-02", group="model", team_id="team_x", model="chat").query()
    assert query.group_by == ("day", "model") and (query.team_id, query.model) == ("team_x", "chat")


@pytest.mark.parametrize(
    ("given", "param"),
    [
        ({"start": "yesterday"}, "start"),
        ({"end": "2026-13-01"}, "end"),
        ({"start": "2026-03-05", "end": "2026-03-01"}, "start"),
        ({"start": "2024-01-01"}, "start"),  # more than a year
        ({"group": "provider"}, "group"),
    ],
)
def test_unusable_filters_are_refused_naming_the_parameter(given: dict[str, str], param: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse(**given)
    assert refused.value.param == param


def row(day: str, model: str, requests: int, prompt: int, cached: int, cost: str, saving: str) -> UsageRow:
    return UsageRow(
        day=day,
        model=model,
        requests=requests,
        prompt_tokens=prompt,
        completion_tokens=requests * 10,
        cached_tokens=cached,
        cost=Decimal(cost),
        saving=Decimal(saving),
    )


def test_charts_table_and_totals_come_from_the_same_rows() -> None:
    filters = parse(start="2026-03-09", end="2026-03-10", group="model")
    rows = [
        row("2026-03-09", "chat", 2, 100, 50, "0.01", "0.002"),
        row("2026-03-10", "chat", 1, 100, 0, "0.02", "0"),
        row("2026-03-10", "mini", 4, 300, 150, "0.03", "0.004"),
    ]
    view = usage_view(rows, filters, {})
    by_metric = {chart.metric: chart for chart in view.charts}
    requests = {(bar.day, bar.series): bar.value for bar in by_metric["requests"].bars}
    assert requests == {("2026-03-09", "chat"): "2", ("2026-03-10", "mini"): "4", ("2026-03-10", "chat"): "1"}
    shares = {bar.day: bar.value for bar in by_metric["cached_share"].bars}
    assert shares == {"2026-03-09": "50.0%", "2026-03-10": "37.5%"}  # 150 of 400 prompt tokens
    assert (view.total.requests, view.total.cost, view.total.saving) == (7, Decimal("0.06"), Decimal("0.006"))
    assert view.cached_share == "40.0%"  # 200 of 500
    assert [(line.day, line.group) for line in view.rows] == [
        ("2026-03-09", "chat"),
        ("2026-03-10", "chat"),
        ("2026-03-10", "mini"),
    ]


def test_team_groups_are_labelled_by_name_and_the_smallest_stacked_as_other() -> None:
    filters = parse(start="2026-03-10", end="2026-03-10", group="team")
    rows = [UsageRow(day="2026-03-10", team_id=f"team_{n}", requests=100 - n) for n in range(MAX_SERIES + 2)]
    view = usage_view(rows, filters, {f"team_{n}": f"name-{n}" for n in range(MAX_SERIES + 2)})
    series = [bar.series for bar in view.charts[0].bars]
    assert series == [f"name-{n}" for n in range(MAX_SERIES)] + [OTHER]
    assert view.charts[0].bars[-1].value == str((100 - MAX_SERIES) + (100 - MAX_SERIES - 1))


def test_the_table_is_paged_while_charts_and_totals_keep_every_row() -> None:
    filters = parse(start="2026-03-01", end="2026-03-10", group="model")
    days = filters.days
    rows = [
        UsageRow(day=day, model=f"model-{n:03d}", requests=1, prompt_tokens=10)
        for day in days
        for n in range(TABLE_PAGE // 4)
    ]
    assert len(rows) > 2 * TABLE_PAGE
    second = usage_view(rows, filters, {}, page=2)
    assert (second.page, second.pages, second.row_count) == (2, 3, len(rows))
    assert [line.row for line in second.rows] == rows[TABLE_PAGE : 2 * TABLE_PAGE]
    assert second.first_row == TABLE_PAGE + 1
    assert second.total.requests == len(rows), "the totals are over every page"
    assert sum(Decimal(bar.value) for bar in second.charts[0].bars) == len(rows), "and so are the charts"
    assert second.page_params(3) == filters.params() | {"page": "3"}
    last = usage_view(rows, filters, {}, page=99)
    assert (last.page, [line.row for line in last.rows]) == (3, rows[2 * TABLE_PAGE :])


def test_an_unreadable_page_is_refused_naming_the_parameter() -> None:
    assert (table_page(None), table_page(""), table_page("4")) == (1, 1, 4)
    for text in ("0", "-1", "two"):
        with pytest.raises(InvalidRequest) as refused:
            table_page(text)
        assert refused.value.param == "page"


def test_model_and_tier_groups_reach_the_query_and_label_the_series() -> None:
    filters = parse(start="2026-03-10", end="2026-03-10", group="model_tier")
    assert filters.query().group_by == ("day", "model", "tier")
    rows = [
        UsageRow(day="2026-03-10", model="chat", service_tier="flex", requests=3, cost=Decimal("0.01")),
        UsageRow(day="2026-03-10", model="chat", service_tier=None, requests=1, cost=Decimal("0.04")),
    ]
    view = usage_view(rows, filters, {})
    requests = {bar.series: bar.value for bar in view.charts[0].bars}
    assert requests == {"chat / flex": "3", "chat / no tier": "1"}
    assert [line.group for line in view.rows] == ["chat / flex", "chat / no tier"]
    assert parse(group="tier").query().group_by == ("day", "tier")
