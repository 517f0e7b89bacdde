"""The verdicts of the benchmark's `truth` scenario (bench/batch_jobs/truth.py): the gateway's
throughput against the simulator's stats, each figure within its tolerance or not."""

from __future__ import annotations

from typing import Any

from bench.batch_jobs.truth import agreement, edges, job_lines

STATS = {
    "prefill_tokens_per_s": 1000.0,
    "generation_tokens_per_s": 200.0,
    "prefix_cache_hits": 900,
    "prefix_cache_queries": 1000,
    "elapsed_s": 10.0,
}


def reported(**changes: Any) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "span_s": 10.2,
        "tokens": {"prompt": 10_000, "cached": 9_000, "completion": 2_000},
        "cache_hit_ratio": 0.9,
        "prefill_tokens_per_s": 1040.0,  # 4% over
        "decode_tokens_per_s": 195.0,  # 2.5% under
    }
    return figures | changes


def verdicts(throughput: dict[str, Any]) -> dict[str, str]:
    return {f.name: f.verdict for f in agreement(throughput, STATS) if f.met is not None}


def test_figures_within_their_tolerance_pass() -> None:
    assert set(verdicts(reported()).values()) == {"pass"}


def test_a_rate_off_by_more_than_five_percent_or_a_ratio_by_more_than_a_point_misses() -> None:
    judged = verdicts(reported(prefill_tokens_per_s=1060.0, cache_hit_ratio=0.885))
    assert judged == {
        "prefill_tokens_per_s: gateway vs simulator": "miss",
        "decode_tokens_per_s: gateway vs simulator": "pass",
        "cache hit ratio: gateway - simulator": "miss",
    }


def test_a_rate_the_gateway_does_not_know_misses() -> None:
    assert verdicts(reported(decode_tokens_per_s=None))["decode_tokens_per_s: gateway vs simulator"] == "miss"


def test_the_edges_show_the_time_each_side_divided_by() -> None:
    # 1,000 uncached tokens at 1,040/s, 2,000 completion tokens at 195/s
    assert edges(reported(), STATS) == "10.00 / 10.20 / 0.96 / 10.26"


def test_the_lines_share_their_prefix_within_a_group_only() -> None:
    lines = job_lines()
    by_group: dict[str, set[str]] = {}
    for line in lines:
        by_group.setdefault(line.group, set()).add(line.chat.messages[0]["content"])
    assert all(len(systems) == 1 for systems in by_group.values())
    assert len({next(iter(systems)) for systems in by_group.values()}) == len(by_group)
    assert len({line.custom_id for line in lines}) == len(lines)
