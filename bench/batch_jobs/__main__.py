"""`python -m bench.batch_jobs [scenario...]` (`make bench-jobs`): every scenario, or those named,
each printing its figures as it ends; then one table of them all."""

from __future__ import annotations

import sys
from pathlib import Path

from bench.batch_jobs import crash, prefix_cache, throughput, truth
from bench.batch_jobs.stack import JobsRun, migrate, recreate_database
from bench.suite import Suite


def prepare(workdir: Path) -> None:
    recreate_database()
    migrate(workdir)


SUITE = Suite[JobsRun](
    title="batch jobs benchmark",
    prog="python -m bench.batch_jobs",
    scenarios={
        "crash": crash.run,
        "throughput": throughput.run,
        "prefix-cache": prefix_cache.run,
        "truth": truth.run,
    },
    open_run=JobsRun,
    prepare=prepare,
)

if __name__ == "__main__":
    sys.exit(SUITE.main())
