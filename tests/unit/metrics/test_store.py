"""A worker's series file is what prometheus_client's multiprocess mode reads: each move visible at
once, summed over the workers' files, every slot kept when the file grows."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.multiprocess import MultiProcessCollector

from gateway.metrics.store import INITIAL_BYTES, LocalSeries, SeriesFile

REQUESTS = ("gateway_requests", "gateway_requests_total")
HELP = "Requests that reached an upstream"


def samples(directory: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """What a scrape reads from `directory`, as the library merges it."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for metric in MultiProcessCollector.merge([str(p) for p in directory.glob("*.db")])  # type: ignore[no-untyped-call]
        for sample in metric.samples
    }


def test_a_move_is_read_at_once_by_another_reader(tmp_path: Path) -> None:
    series = SeriesFile(tmp_path / "counter_gateway_1.db")
    slot = series.slot(*REQUESTS, {"model": "chat"}, HELP)
    series.values[slot] += 1
    series.values[slot] += 1
    read = list(MmapedDict.read_all_values_from_file(str(series.path)))  # type: ignore[no-untyped-call]
    assert [(value, timestamp) for _, value, timestamp, _ in read] == [(2.0, 0.0)]
    series.values[slot] += 3  # no flush, no close: the mapping is the file
    assert samples(tmp_path)[("gateway_requests_total", (("model", "chat"),))] == 5


def test_the_workers_counts_are_summed_and_histograms_accumulated(tmp_path: Path) -> None:
    for pid, (chat, embed, fast, slow) in {11: (3, 1, 2, 1), 12: (4, 0, 0, 5)}.items():
        counters = SeriesFile(tmp_path / f"counter_gateway_{pid}.db")
        counters.values[counters.slot(*REQUESTS, {"model": "chat"}, HELP)] += chat
        counters.values[counters.slot(*REQUESTS, {"model": "embed"}, HELP)] += embed
        histograms = SeriesFile(tmp_path / f"histogram_gateway_{pid}.db")
        name = "gateway_overhead_seconds"
        buckets = [histograms.slot(name, f"{name}_bucket", {"le": le}, "overhead") for le in ("0.1", "+Inf")]
        total = histograms.slot(name, f"{name}_sum", {}, "overhead")
        histograms.values[buckets[0]] += fast
        histograms.values[buckets[1]] += slow
        histograms.values[total] += fast * 0.05 + slow * 1.0

    merged = samples(tmp_path)
    assert merged[("gateway_requests_total", (("model", "chat"),))] == 7
    assert merged[("gateway_requests_total", (("model", "embed"),))] == 1
    assert merged[("gateway_overhead_seconds_bucket", (("le", "0.1"),))] == 2
    assert merged[("gateway_overhead_seconds_bucket", (("le", "+Inf"),))] == 8  # cumulative
    assert merged[("gateway_overhead_seconds_count", ())] == 8
    assert abs(merged[("gateway_overhead_seconds_sum", ())] - 6.1) < 1e-9


def test_slots_keep_their_values_as_the_file_grows(tmp_path: Path) -> None:
    series = SeriesFile(tmp_path / "counter_gateway_1.db")
    slots = []
    for i in range(2000):  # ~200 bytes an entry: several doublings past the first 64 KiB
        slot = series.slot(*REQUESTS, {"model": f"model-{i:04d}", "provider": "p" * 100}, HELP)
        series.values[slot] += i
        slots.append(slot)
    assert series.path.stat().st_size > 4 * INITIAL_BYTES
    series.values[slots[0]] += 0.5  # a slot made before the first doubling, moved after the last
    merged = samples(tmp_path)
    assert len(merged) == 2000
    assert merged[("gateway_requests_total", (("model", "model-0000"), ("provider", "p" * 100)))] == 0.5
    assert merged[("gateway_requests_total", (("model", "model-1999"), ("provider", "p" * 100)))] == 1999


def test_a_process_id_used_again_carries_on_from_its_file(tmp_path: Path) -> None:
    first = SeriesFile(tmp_path / "counter_gateway_1.db")
    first.values[first.slot(*REQUESTS, {"model": "chat"}, HELP)] += 9
    again = SeriesFile(tmp_path / "counter_gateway_1.db")
    again.values[again.slot(*REQUESTS, {"model": "chat"}, HELP)] += 1  # the same slot: counts go on
    again.values[again.slot(*REQUESTS, {"model": "embed"}, HELP)] += 1
    assert samples(tmp_path) == {
        ("gateway_requests_total", (("model", "chat"),)): 10,
        ("gateway_requests_total", (("model", "embed"),)): 1,
    }


def test_local_series_are_numbers_in_the_process() -> None:
    series = LocalSeries()
    first, second = series.slot(*REQUESTS, {}, HELP), series.slot(*REQUESTS, {}, HELP)
    series.values[second] += 2.5
    assert (series.values[first], series.values[second]) == (0.0, 2.5)
