"""`python -m bench.quotes [shape...]`: for each job shape, a quote of a job on the simulated vLLM
and the job run, its measured cost against the quote's (equal: same tokens, same prices) and its
duration against the quote's spread; then one table of them all."""

from __future__ import annotations

import sys

from bench.batch_jobs.__main__ import prepare
from bench.batch_jobs.stack import JobsRun
from bench.quotes import shapes
from bench.suite import Suite

SUITE = Suite[JobsRun](
    title="batch quotes benchmark",
    prog="python -m bench.quotes",
    scenarios={shape.name: shape.run for shape in shapes.SHAPES},
    open_run=JobsRun,
    prepare=prepare,
)

if __name__ == "__main__":
    sys.exit(SUITE.main())
