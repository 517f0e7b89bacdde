"""What a process tree costs, read from /proc: CPU time (utime + stime) and peak RSS (VmHWM)."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def tree(pid: int) -> list[int]:
    """`pid` and every descendant (uvicorn's workers are children of its supervisor)."""
    found = [pid]
    for child in _children(pid):
        found.extend(tree(child))
    return found


def _children(pid: int) -> list[int]:
    children: list[int] = []
    task_dir = Path(f"/proc/{pid}/task")
    if not task_dir.exists():
        return children
    for task in task_dir.iterdir():
        try:
            children.extend(int(c) for c in (task / "children").read_text().split())
        except OSError:
            continue
    return children


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process, in seconds (fields 14 and 15 of /proc/<pid>/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()  # the command name may contain spaces
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def peak_rss_mb(pid: int) -> float:
    """VmHWM: the highest resident set size since start (or since the last `reset_peak`)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def reset_peak(pid: int) -> None:
    """Writing 5 to clear_refs resets VmHWM to the current RSS (Linux >= 4.0), so each run has its own."""
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/clear_refs").write_text("5")


@dataclass(frozen=True)
class Usage:
    cpu_s: float
    peak_rss_mb: float  # the largest single process of the tree: the per-worker figure


class TreeMeter:
    """CPU spent and peak RSS of a process tree between `start()` and `stop()`."""

    def __init__(self, root_pid: int) -> None:
        self.root_pid = root_pid
        self._cpu_at_start: dict[int, float] = {}

    def start(self) -> None:
        pids = tree(self.root_pid)
        for pid in pids:
            reset_peak(pid)
        self._cpu_at_start = {pid: cpu_seconds(pid) for pid in pids}

    def stop(self) -> Usage:
        pids = tree(self.root_pid)
        spent = sum(cpu_seconds(pid) - self._cpu_at_start.get(pid, 0.0) for pid in pids)
        return Usage(cpu_s=spent, peak_rss_mb=max((peak_rss_mb(pid) for pid in pids), default=0.0))
