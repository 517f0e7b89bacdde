"""`make bench`'s last table: each target against the figures of the run, met, missed or not measured."""

from __future__ import annotations

from bench.load import WrkResult
from bench.procstat import Usage
from bench.report import Extras, Row, targets


def _row(target: str, mode: str, connections: int, p50: float, p99: float, cpu_s: float) -> Row:
    wrk = WrkResult(requests=10_000, duration_s=1.0, p50_ms=p50, p90_ms=p99, p99_ms=p99, errors=0, non_2xx=0)
    return Row(target, mode, connections, wrk, Usage(cpu_s=cpu_s, peak_rss_mb=100.0))


def _verdicts(table: str) -> list[str]:
    return [line.rsplit("|", 2)[1].strip() for line in table.splitlines()[2:]]


ROWS = [
    _row("direct", "non-streaming", 1, p50=0.02, p99=0.04, cpu_s=0.1),
    _row("gateway", "non-streaming", 1, p50=0.29, p99=1.8, cpu_s=2.2),
    _row("gateway", "non-streaming", 16, p50=1.2, p99=4.9, cpu_s=0.79),  # 0.079 ms a request
    _row("gateway", "non-streaming", 64, p50=3.8, p99=11.4, cpu_s=0.66),
    _row("gateway", "non-streaming", 256, p50=14.9, p99=38.7, cpu_s=0.66),
    _row("gateway", "50 ms upstream", 256, p50=51.5, p99=58.4, cpu_s=1.15),
]
EXTRAS = Extras(
    added_ttft_ms=0.56, streams=1000, streams_failed=0, streams_peak_rss_mb=136, writer_records_s=53_589
)


def test_a_run_within_every_target_is_met_everywhere() -> None:
    table = targets(ROWS, EXTRAS)
    assert _verdicts(table) == ["**met**"] * 6
    assert "16: 0.079 ms / 64: 0.066 ms / 256: 0.066 ms" in table
    assert "+0.27 ms" in table and "58.40 ms" in table and "53,589 records/s" in table


def test_each_figure_past_its_target_is_missed() -> None:
    slower = [
        *ROWS[:3],
        _row("gateway", "non-streaming", 64, p50=12.3, p99=32.9, cpu_s=2.5),  # 0.25 ms a request
        _row("gateway", "non-streaming", 256, p50=14.9, p99=38.7, cpu_s=0.66),
        _row("gateway", "50 ms upstream", 256, p50=69.8, p99=117.2, cpu_s=3.1),
    ]
    extras = Extras(
        added_ttft_ms=1.01, streams=1000, streams_failed=2, streams_peak_rss_mb=137, writer_records_s=19_132
    )
    assert _verdicts(targets(slower, extras)) == [
        "**missed**",
        "**met**",
        "**missed**",
        "**missed**",
        "**missed**",
        "**missed**",
    ]


def test_a_section_that_did_not_run_is_not_measured() -> None:
    only_loaded = [ROWS[3]]  # `--connections 64 --modes json --skip-extras`
    assert _verdicts(targets(only_loaded, Extras())) == ["**met**"] + ["not measured"] * 5
