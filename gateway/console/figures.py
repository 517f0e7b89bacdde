"""How the console writes numbers: counts with thousands separators, exact USD, shares in percent."""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal

MISSING = "\N{EN DASH}"  # what a table shows for a figure that does not exist
CENT_FRACTIONS = Decimal("0.000001")  # costs per request are tiny: six decimal places of a dollar


def count(value: int | Decimal | float | None) -> str:
    if value is None:
        return MISSING
    return f"{int(value):,}"


def usd(value: Decimal | str | None) -> str:
    """$1,234.567890: rounded to a millionth of a dollar for reading; the CSV keeps every digit."""
    if value is None:
        return MISSING
    amount = Decimal(value).quantize(CENT_FRACTIONS, rounding=ROUND_HALF_EVEN)
    return f"${amount:,.6f}"


def percent(part: int | Decimal, whole: int | Decimal) -> str:
    if not whole:
        return MISSING
    return f"{Decimal(part) * 100 / Decimal(whole):.1f}%"


def share(ratio: float | None) -> str:
    return MISSING if ratio is None else f"{ratio * 100:.1f}%"


def rate(value: float | None) -> str:
    return MISSING if value is None else f"{value:,.1f}"


def millis(value: float | None) -> str:
    return MISSING if value is None else f"{value:,.0f} ms"


def seconds(value: float | None) -> str:
    return MISSING if value is None else f"{value:,.2f} s"
