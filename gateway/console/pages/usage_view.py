"""The usage page from one report: the filters it was asked with, and the charts, totals and table
made from the report's rows (grouped by day, and by team, model, service tier or model and tier when
asked), without another query.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Literal

from gateway.console import figures
from gateway.console.charts import BarChart, Series, stacked_bars
from gateway.errors import InvalidRequest
from gateway.metering.reports.usage import GroupField, UsageQuery, UsageRow

Grouping = Literal["none", "team", "model", "tier", "model_tier"]
GROUPINGS: tuple[Grouping, ...] = ("none", "team", "model", "tier", "model_tier")
# the report's group-by fields beside the day, for each grouping (tier: the service tier served)
GROUP_FIELDS: dict[Grouping, tuple[GroupField, ...]] = {
    "none": (),
    "team": ("team",),
    "model": ("model",),
    "tier": ("tier",),
    "model_tier": ("model", "tier"),
}
DEFAULT_DAYS = 30
MAX_DAYS = 366
MAX_SERIES = 7  # the largest groups get a colour each; the rest are stacked as one "other"
# The table's rows per page: a year by day fits on two, while a 90-day table by team (1,800 rows)
# is paged rather than rendered whole; the charts and totals are always over every row, and the
# CSV has them all.
TABLE_PAGE = 200
OTHER = "other"
ALL = "all"
NO_TIER = "no tier"  # a record whose request named no service tier, nor its answer


@dataclass(frozen=True, slots=True)
class UsageFilters:
    """What the page shows: whole UTC days from `first` to `last` (both included)."""

    first: date
    last: date
    group: Grouping = "none"
    team_id: str | None = None
    model: str | None = None

    @classmethod
    def parse(
        cls,
        *,
        start: str | None,
        end: str | None,
        group: str | None,
        team_id: str | None,
        model: str | None,
        today: date,
    ) -> UsageFilters:
        last = _day(end, "end") or today
        first = _day(start, "start") or last - timedelta(days=DEFAULT_DAYS - 1)
        if first > last:
            raise InvalidRequest("The first day comes after the last.", param="start")
        if (last - first).days >= MAX_DAYS:
            raise InvalidRequest(f"Choose at most {MAX_DAYS} days.", param="start")
        grouping = group or "none"
        if grouping not in GROUPINGS:
            raise InvalidRequest("Group by none, team, model, tier or model_tier.", param="group")
        return cls(first, last, grouping, team_id or None, model or None)

    @property
    def days(self) -> list[str]:
        return [
            (self.first + timedelta(days=n)).isoformat() for n in range((self.last - self.first).days + 1)
        ]

    def query(self) -> UsageQuery:
        group_by: tuple[GroupField, ...] = ("day", *GROUP_FIELDS[self.group])
        return UsageQuery(
            start=datetime.combine(self.first, time(), UTC),
            end=datetime.combine(self.last + timedelta(days=1), time(), UTC),
            group_by=group_by,
            team_id=self.team_id,
            model=self.model,
        )

    def params(self) -> dict[str, str]:
        """The filters as query parameters, for links (the CSV) that show the same."""
        values = {"start": self.first.isoformat(), "end": self.last.isoformat(), "group": self.group}
        values |= {"team": self.team_id or "", "model": self.model or ""}
        return {name: value for name, value in values.items() if value}


@dataclass(frozen=True, slots=True)
class TableRow:
    day: str
    group: str | None
    row: UsageRow

    @property
    def cached_share(self) -> str:
        return figures.percent(self.row.cached_tokens, self.row.prompt_tokens)


@dataclass(frozen=True, slots=True)
class UsageView:
    filters: UsageFilters
    charts: list[BarChart]
    rows: list[TableRow]  # the table's page of the report's rows
    total: UsageRow
    cached_share: str
    page: int = 1
    pages: int = 1
    row_count: int = 0  # the report's rows, on every page
    first_row: int = 1  # the page's first row, counted from 1

    def page_params(self, page: int) -> dict[str, str]:
        """The query parameters of another page of the table, with the same filters."""
        return self.filters.params() | {"page": str(page)}


def table_page(text: str | None) -> int:
    """The `page` parameter: a page of the table, counted from 1 (default 1)."""
    if not text:
        return 1
    try:
        page = int(text)
    except ValueError:
        page = 0
    if page < 1:
        raise InvalidRequest("`page` must be a whole number, 1 or more.", param="page")
    return page


def usage_view(
    rows: Sequence[UsageRow], filters: UsageFilters, team_names: Mapping[str, str], page: int = 1
) -> UsageView:
    """Charts by day (stacked by group), the grand total and one page of the table, all from the
    report rows. A page past the last shows the last."""
    days = filters.days
    label = _labeller(filters.group, team_names)
    by_group: dict[str, dict[str, UsageRow]] = defaultdict(dict)  # group -> day -> row
    for row in rows:
        if row.day is not None:
            by_group[label(row)][row.day] = row
    ranked = sorted(by_group, key=lambda g: (-sum(r.requests for r in by_group[g].values()), g))
    shown, rest = ranked[:MAX_SERIES], ranked[MAX_SERIES:]

    def series(metric: str) -> list[Series]:
        def values(groups: Sequence[str]) -> list[Decimal]:
            return [sum((_metric(by_group[g].get(day), metric) for g in groups), Decimal(0)) for day in days]

        drawn = [Series(g, values([g])) for g in shown]
        return [*drawn, Series(OTHER, values(rest))] if rest else drawn

    daily = [_sum(r for g in by_group.values() if (r := g.get(day)) is not None) for day in days]
    shares = [Series("cached share", [_share(row) for row in daily])]
    charts = [
        stacked_bars("requests", "Requests", days, series("requests"), figures.count, whole=True),
        stacked_bars(
            "tokens", "Tokens (prompt + completion)", days, series("tokens"), figures.count, whole=True
        ),
        stacked_bars("cost", "Cost (USD)", days, series("cost"), figures.usd),
        stacked_bars("cached_share", "Cached share of prompt tokens", days, shares, _percent_label),
        stacked_bars("saving", "Saving from cached prompts (USD)", days, series("saving"), figures.usd),
    ]
    pages = max(1, math.ceil(len(rows) / TABLE_PAGE))
    page = min(page, pages)
    first = (page - 1) * TABLE_PAGE
    table = [
        TableRow(row.day or "", None if filters.group == "none" else label(row), row)
        for row in rows[first : first + TABLE_PAGE]
    ]
    total = _sum(rows)
    share = figures.percent(total.cached_tokens, total.prompt_tokens)
    return UsageView(filters, charts, table, total, share, page, pages, len(rows), first + 1)


def _labeller(group: Grouping, team_names: Mapping[str, str]) -> Callable[[UsageRow], str]:
    if group == "team":
        return lambda row: team_names.get(row.team_id or "", row.team_id or figures.MISSING)
    if group == "model":
        return lambda row: row.model or figures.MISSING
    if group == "tier":
        return lambda row: row.service_tier or NO_TIER
    if group == "model_tier":
        return lambda row: f"{row.model or figures.MISSING} / {row.service_tier or NO_TIER}"
    return lambda row: ALL


def _metric(row: UsageRow | None, metric: str) -> Decimal:
    if row is None:
        return Decimal(0)
    if metric == "tokens":
        return Decimal(row.prompt_tokens + row.completion_tokens)
    value: int | Decimal = getattr(row, metric)
    return Decimal(value)


def _share(row: UsageRow) -> Decimal:
    """Cached prompt tokens as a percentage of prompt tokens, to a tenth of a percent."""
    if not row.prompt_tokens:
        return Decimal(0)
    return (Decimal(row.cached_tokens) * 100 / row.prompt_tokens).quantize(Decimal("0.1"))


def _percent_label(value: Decimal) -> str:
    return f"{value:.1f}%"


def _sum(rows: Iterable[UsageRow]) -> UsageRow:
    total = UsageRow()
    for row in rows:
        total.requests += row.requests
        total.prompt_tokens += row.prompt_tokens
        total.completion_tokens += row.completion_tokens
        total.cached_tokens += row.cached_tokens
        total.cache_write_tokens += row.cache_write_tokens
        total.cost += row.cost
        total.saving += row.saving
    return total


def _day(text: str | None, param: str) -> date | None:
    if not text:
        return None
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise InvalidRequest(f"`{param}` must be a date, YYYY-MM-DD.", param=param) from None
