"""Child processes of the test session die with it, even when pytest itself is killed.

A `gateway serve` left behind by an interrupted run keeps reading the shared Redis stream of the
next run (same database number, same consumer group) and takes its usage entries away.
"""

from __future__ import annotations

import ctypes
import signal

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """`preexec_fn` for subprocess.Popen: SIGTERM this child when the test process ends (Linux)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
