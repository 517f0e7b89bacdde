"""The printed results: one Markdown table for the wrk matrix, short tables for the rest."""

from __future__ import annotations

from dataclasses import dataclass

from bench.load import WrkResult
from bench.procstat import Usage


@dataclass(frozen=True)
class Row:
    target: str  # direct | gateway
    mode: str  # non-streaming | streaming | 50 ms upstream
    connections: int
    wrk: WrkResult
    usage: Usage  # of the serving process: nginx for direct, the gateway for gateway

    @property
    def cpu_ms_per_request(self) -> float:
        return self.usage.cpu_s * 1000 / self.wrk.requests if self.wrk.requests else 0.0


HEADER = (
    "| target | mode | conns | req/s | p50 ms | p90 ms | p99 ms | server CPU ms/req | peak RSS MB | errors |\n"
    "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def matrix(rows: list[Row]) -> str:
    lines = [HEADER]
    for row in rows:
        w = row.wrk
        lines.append(
            f"| {row.target} | {row.mode} | {row.connections} | {w.rps:,.0f} | {w.p50_ms:.2f} | "
            f"{w.p90_ms:.2f} | {w.p99_ms:.2f} | {row.cpu_ms_per_request:.3f} | "
            f"{row.usage.peak_rss_mb:.0f} | {w.errors + w.non_2xx} |"
        )
    return "\n".join(lines)


def key_values(title: str, pairs: list[tuple[str, str]]) -> str:
    lines = [f"| {title} | |", "|---|---:|"]
    lines += [f"| {k} | {v} |" for k, v in pairs]
    return "\n".join(lines)
