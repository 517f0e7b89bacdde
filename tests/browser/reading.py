"""Reading figures off a console page as a person reads them: the totals, a chart's bars (each bar's
value, as its tooltip says) and the table's cells."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal

from playwright.sync_api import Page


def number(text: str) -> Decimal:
    """ "1,234" -> 1234; "$0.000238" -> 0.000238; "40.0%" -> 40.0."""
    return Decimal(text.strip().replace(",", "").replace("$", "").rstrip("%"))


def tile(page: Page, name: str) -> str:
    return page.locator(f'[data-total="{name}"]').inner_text().strip()


def chart(page: Page, metric: str) -> dict[str, Decimal]:
    """Each series' bars in a chart, summed over the days shown."""
    totals: dict[str, Decimal] = defaultdict(Decimal)
    bars = page.locator(f'figure[data-metric="{metric}"] rect.bar')
    for i in range(bars.count()):
        bar = bars.nth(i)
        totals[bar.get_attribute("data-series") or ""] += number(bar.get_attribute("data-value") or "0")
    return dict(totals)


def chart_tooltips(page: Page, metric: str) -> list[str]:
    """What hovering each bar of a chart shows."""
    titles = page.locator(f'figure[data-metric="{metric}"] rect.bar title')
    return [titles.nth(i).text_content() or "" for i in range(titles.count())]


def table_sum(page: Page, field: str, group: str | None = None) -> Decimal:
    """A column of the usage table summed over its days (over one group's rows when given)."""
    rows = "#usage-table tbody tr" + (f'[data-group="{group}"]' if group is not None else "")
    cells = page.locator(f'{rows} td[data-field="{field}"]')
    return sum((number(cells.nth(i).inner_text()) for i in range(cells.count())), Decimal(0))
