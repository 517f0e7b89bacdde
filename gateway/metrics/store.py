"""Where the numbers behind the per-request series live: in the process, or in a file every worker reads.

One worker keeps them in a list of its own. With several (`gateway serve`, a metrics directory
in PROMETHEUS_MULTIPROC_DIR), each worker keeps them in files of its own, memory-mapped, in the
layout of prometheus_client's multiprocess mode (`prometheus_client.mmap_dict.MmapedDict`: a used
length, then entries of a JSON key padded to 8 bytes and two doubles, value and timestamp), and a
scrape in any worker reads every worker's files with the library's `MultiProcessCollector`.

The library's own multiprocess values take a lock, check the process id and pack a struct on
every increment, and scan the buckets in Python per observation: for the dozen numbers a request
moves, about ten times what they cost here (docs/operations.md, "Metrics"). Here an increment is one store into the mapping, an
aligned double that a reader sees whole, and visible to the other workers as soon as it is made.
Only the series `gateway.metrics.instruments` moves on the hot path live here; the rest are the library's.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from pathlib import Path
from typing import BinaryIO, Protocol

from prometheus_client.mmap_dict import MmapedDict

INITIAL_BYTES = 1 << 16  # as the library's files start
_HEADER_BYTES = 8  # the used length (4 bytes), then padding
_USED = struct.Struct("i")


class Numbers(Protocol):
    def __getitem__(self, slot: int, /) -> float: ...
    def __setitem__(self, slot: int, value: float, /) -> None: ...


class SeriesStore(Protocol):
    """Numbers addressed by slot; `values[slot] += x` is the whole cost of moving one."""

    @property
    def values(self) -> Numbers: ...

    def slot(self, metric: str, sample: str, labels: dict[str, str], documentation: str) -> int:
        """A new number, 0 until moved, for one sample of `metric` (`sample`: its name with suffix)."""
        ...


class LocalSeries:
    """One process's numbers, read by `gateway.metrics.instruments.Metrics.families` when it is scraped."""

    def __init__(self) -> None:
        self.values: list[float] = []

    def slot(self, metric: str, sample: str, labels: dict[str, str], documentation: str) -> int:
        self.values.append(0.0)
        return len(self.values) - 1


class SeriesFile:
    """One process's numbers of one metric type (`counter_...db`, `histogram_...db`), in a file.

    Only this process writes it, from its event loop's thread. A new slot's entry is written
    before the used length that covers it, so a reader never meets half an entry; the file grows
    by doubling, and a slot keeps its place (`values` is re-mapped over the grown file). A file
    already there (a process id used again under the same directory) is carried on, as the library
    does: its counts never go back."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: BinaryIO = path.open("a+b")
        self._capacity = os.fstat(self._file.fileno()).st_size
        if self._capacity == 0:
            self._capacity = INITIAL_BYTES
            self._file.truncate(self._capacity)
        self._map()
        self._used = _USED.unpack_from(self._mapping, 0)[0] or _HEADER_BYTES
        self._slots: dict[str, int] = {
            key: position // 8
            for key, _, _, position in MmapedDict.read_all_values_from_file(str(path))  # type: ignore[no-untyped-call]
        }
        self._write_used()

    def slot(self, metric: str, sample: str, labels: dict[str, str], documentation: str) -> int:
        key = json.dumps([metric, sample, labels, documentation], sort_keys=True)
        known = self._slots.get(key)
        if known is not None:
            return known
        encoded = key.encode()
        padded = encoded + b" " * (8 - (len(encoded) + 4) % 8)  # the value that follows starts 8-aligned
        entry = struct.pack(f"i{len(padded)}sdd", len(encoded), padded, 0.0, 0.0)
        while self._used + len(entry) > self._capacity:
            self._capacity *= 2
            self._file.truncate(self._capacity)
            self._map()
        self._mapping[self._used : self._used + len(entry)] = entry
        self._used += len(entry)
        self._write_used()
        slot = self._slots[key] = (self._used - 16) // 8  # the value's index among the file's doubles
        return slot

    def _map(self) -> None:
        self._mapping = mmap.mmap(self._file.fileno(), self._capacity)
        self.values: memoryview[float] = memoryview(self._mapping).cast("d")

    def _write_used(self) -> None:
        # One slice assignment, as the library writes it: `pack_into` can show a reader a 0 first.
        self._mapping[0:4] = _USED.pack(self._used)
