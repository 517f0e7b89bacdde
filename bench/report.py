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


@dataclass
class Extras:
    """The figures of the sections after the wrk matrix, when they ran."""

    added_ttft_ms: float | None = None
    streams: int | None = None
    streams_failed: int | None = None
    streams_peak_rss_mb: float | None = None
    writer_records_s: float | None = None


CPU_MS_PER_REQUEST = 0.2  # at 64 connections; 16 and 256 are shown beside it
CPU_CONNECTIONS = 64
ADDED_P50_MS = 1.0
SLOW_P99_MS = 60.0
ADDED_TTFT_MS = 1.0
STREAMS_RSS_MB = 150.0
WRITER_RECORDS_S = 20_000.0


def _row(rows: list[Row], target: str, mode: str, connections: int) -> Row | None:
    return next((r for r in rows if (r.target, r.mode, r.connections) == (target, mode, connections)), None)


def _verdict(met: bool | None) -> str:
    return "not measured" if met is None else ("**met**" if met else "**missed**")


def targets(rows: list[Row], extras: Extras) -> str:
    """Each target of the benchmark against what this run measured: met, missed or not measured."""
    lines = ["| target | measured | verdict |", "|---|---|---|"]

    loaded = [r for c in (16, 64, 256) if (r := _row(rows, "gateway", "non-streaming", c)) is not None]
    cpu = " / ".join(f"{r.connections}: {r.cpu_ms_per_request:.3f} ms" for r in loaded) or "-"
    judged = _row(rows, "gateway", "non-streaming", CPU_CONNECTIONS)
    cpu_met = None if judged is None else judged.cpu_ms_per_request <= CPU_MS_PER_REQUEST
    lines.append(
        f"| gateway CPU per non-streaming request at {CPU_CONNECTIONS} connections <= "
        f"{CPU_MS_PER_REQUEST} ms, one worker (by connections) | {cpu} | {_verdict(cpu_met)} |"
    )

    direct, gateway = _row(rows, "direct", "non-streaming", 1), _row(rows, "gateway", "non-streaming", 1)
    added = gateway.wrk.p50_ms - direct.wrk.p50_ms if direct and gateway else None
    lines.append(
        f"| added p50 at 1 connection <= {ADDED_P50_MS:g} ms over direct "
        f"| {'-' if added is None else f'{added:+.2f} ms'} "
        f"| {_verdict(None if added is None else added <= ADDED_P50_MS)} |"
    )

    slow = _row(rows, "gateway", "50 ms upstream", 256)
    lines.append(
        f"| 50 ms upstream at 256 connections: p99 <= {SLOW_P99_MS:g} ms "
        f"| {'-' if slow is None else f'{slow.wrk.p99_ms:.2f} ms'} "
        f"| {_verdict(None if slow is None else slow.wrk.p99_ms <= SLOW_P99_MS)} |"
    )

    ttft = extras.added_ttft_ms
    lines.append(
        f"| added time to first token (p50) <= {ADDED_TTFT_MS:g} ms "
        f"| {'-' if ttft is None else f'{ttft:.2f} ms'} "
        f"| {_verdict(None if ttft is None else ttft <= ADDED_TTFT_MS)} |"
    )

    rss, failed = extras.streams_peak_rss_mb, extras.streams_failed
    held, streams_met = "-", None
    if rss is not None and failed is not None:
        held, streams_met = f"{rss:.0f} MB, {failed} failed", rss < STREAMS_RSS_MB and failed == 0
    lines.append(
        f"| {extras.streams or 1000:,} concurrent streams through one worker under "
        f"{STREAMS_RSS_MB:g} MB RSS, none failed | {held} | {_verdict(streams_met)} |"
    )

    rate = extras.writer_records_s
    lines.append(
        f"| metering writer >= {WRITER_RECORDS_S:,.0f} records/s into PostgreSQL "
        f"| {'-' if rate is None else f'{rate:,.0f} records/s'} "
        f"| {_verdict(None if rate is None else rate >= WRITER_RECORDS_S)} |"
    )
    return "\n".join(lines)
