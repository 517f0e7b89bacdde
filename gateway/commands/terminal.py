"""What the CLI commands print: plain-text tables and list options (no extra dependencies)."""

from __future__ import annotations

from datetime import datetime


def split_list(raw: str | None) -> list[str] | None:
    """`a,b` -> ["a", "b"]; no option -> None (no restriction)."""
    if raw is None:
        return None
    return [item.strip() for item in raw.split(",") if item.strip()]


def render_table(headers: list[str], rows: list[list[str]]) -> str:
    """Left-aligned columns as wide as their widest cell."""
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=False)]
    lines = [headers, ["-" * width for width in widths], *rows]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )


def listed(values: list[str] | None) -> str:
    """A restriction list for a table cell: `all` when unrestricted."""
    return "all" if values is None else ",".join(values) or "none"


def or_dash(value: object) -> str:
    return "-" if value is None else str(value)


def when(moment: datetime | None) -> str:
    return "-" if moment is None else f"{moment:%Y-%m-%d %H:%M}"
