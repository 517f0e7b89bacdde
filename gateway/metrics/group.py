"""What a scrape reports with several workers, beyond what prometheus_client's multiprocess mode reads.

The mode (`MultiProcessCollector`) sums the counters and histograms of every worker that ran under
this `gateway serve` (a dead worker's files stay, so its counts stay in the totals: a counter never
goes back) and combines each gauge by its mode. What it cannot do is kept here:

- It leaves out every collector of the process (`process_*`, `python_gc_*`, `python_info`). The
  process metrics are read from /proc for each worker still running, labelled by its `pid`, as the
  scrape is answered; the garbage collector's counts become counters of the mode (`GcCounts`), so
  that they are summed over the workers; `python_info` is the same for every worker, reported once.
- It learns that a worker has exited only from `mark_process_dead`, which the server is to call
  (gunicorn's `child_exit` hook); uvicorn's supervisor has no such hook. A worker found gone when a
  scrape is answered has its per-process gauges (the `live*` modes) dropped then.
"""

from __future__ import annotations

import gc
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from prometheus_client import Counter, PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

# The library's file of a process's histograms: every worker has one from its start, where
# `gateway.metrics.instruments.Metrics` makes its unlabelled histograms.
_WORKER_FILE = re.compile(r"histogram_(\d+)\.db")


def worker_pids(directory: Path) -> set[int]:
    """Every worker that has served under this metrics directory, running or not."""
    return {int(m.group(1)) for p in directory.iterdir() if (m := _WORKER_FILE.fullmatch(p.name))}


def is_running_worker(pid: int) -> bool:
    """This process, or another child of the supervisor this process is a child of, not yet ended."""
    if pid == os.getpid():
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:  # gone (or no /proc: no process metrics either)
        return False
    state, parent = stat.rsplit(b")", 1)[1].split()[:2]
    return state != b"Z" and int(parent) == os.getppid()


class ProcessGroupCollector(Collector):
    """The registry's one collector with several workers: the mode's series of every worker, and
    what the mode leaves out (above)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._series = MultiProcessCollector(None, path=str(directory))  # type: ignore[no-untyped-call]
        self._python = PlatformCollector(registry=None)
        self._processes: dict[int, ProcessCollector] = {}

    def describe(self) -> list[Metric]:
        return []  # nothing to collect when the registry is made: every worker's series, when scraped

    def collect(self) -> Iterator[Metric]:
        running = set()
        for pid in worker_pids(self.directory):
            if is_running_worker(pid):
                running.add(pid)
            else:
                mark_process_dead(pid, str(self.directory))  # type: ignore[no-untyped-call]
        yield from self._series.collect()  # type: ignore[no-untyped-call]
        yield from labelled_by_pid({pid: self._process(pid).collect() for pid in sorted(running)})
        yield from self._python.collect()
        for pid in set(self._processes) - running:
            del self._processes[pid]

    def _process(self, pid: int) -> ProcessCollector:
        collector = self._processes.get(pid)
        if collector is None:
            collector = self._processes[pid] = ProcessCollector(pid=lambda: pid, registry=None)
        return collector


def labelled_by_pid(by_pid: dict[int, Iterable[Metric]]) -> list[Metric]:
    """One family of each name, with a sample per worker labelled by its pid (the process metrics
    are unlabelled gauges and counters)."""
    families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}
    for pid, metrics in by_pid.items():
        for metric in metrics:
            family = families.get(metric.name)
            if family is None:
                kind = CounterMetricFamily if metric.type == "counter" else GaugeMetricFamily
                family = families[metric.name] = kind(metric.name, metric.documentation, labels=["pid"])
            for sample in metric.samples:
                family.add_metric([str(pid)], sample.value)
    return list(families.values())


class GcCounts:
    """A worker's garbage collector counts (the series of prometheus_client's `GCCollector`) as
    counters of the multiprocess mode: each publish adds what the collector did since the last, so
    a scrape sums them over the workers; a dead worker's last counts stay in the sums."""

    SERIES = (
        ("python_gc_objects_collected", "Objects collected during gc", "collected"),
        ("python_gc_objects_uncollectable", "Uncollectable objects found during GC", "uncollectable"),
        ("python_gc_collections", "Number of times this generation was collected", "collections"),
    )

    def __init__(self) -> None:
        generations = range(len(gc.get_stats()))
        self._counters = [
            (
                generation,
                stat,
                Counter(name, documentation, ["generation"], registry=None).labels(str(generation)),
            )
            for name, documentation, stat in self.SERIES
            for generation in generations
        ]
        self._published = [0] * len(self._counters)  # what each counter holds

    def publish(self) -> None:
        stats = gc.get_stats()
        for i, (generation, stat, counter) in enumerate(self._counters):
            count = stats[generation][stat]
            counter.inc(count - self._published[i])
            self._published[i] = count
