"""Request ids: the metering record's key, so unique within a process, across processes and forks."""

from __future__ import annotations

import os
import subprocess
import sys

from gateway.proxy.exchange import RequestIds, new_request_id


def test_ids_of_one_process_are_distinct_and_fit_the_record_key() -> None:
    ids = RequestIds()
    drawn = [ids() for _ in range(10_000)]
    assert len(set(drawn)) == len(drawn)
    assert all(i.startswith("req_") and len(i) <= 64 for i in drawn)


def test_separate_processes_draw_separate_prefixes() -> None:
    code = "from gateway.proxy.exchange import new_request_id; print(new_request_id())"
    first, second = (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        for _ in range(2)
    )
    assert first != second


def test_a_forked_child_does_not_repeat_its_parents_ids() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, to the parent
        os.write(write, new_request_id().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 100).decode()
    os.close(read)
    assert child != new_request_id()
    assert child[:20] != new_request_id()[:20]  # a new prefix, not only a later count
