"""Child processes of the test session die with it, even when pytest itself is killed.

A `gateway serve` left behind by an interrupted run keeps reading the shared Redis stream of the
next run (same database number, same consumer group) and takes its usage entries away.
"""

from __future__ import annotations

import ctypes
import signal
import subprocess

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """`preexec_fn` for subprocess.Popen: SIGTERM this child when the test process ends (Linux)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def stop(process: subprocess.Popen[bytes], timeout_s: float = 5.0) -> None:
    """Terminate a child, then kill it if it does not exit in time."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout_s)
