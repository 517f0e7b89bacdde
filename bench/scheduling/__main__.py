"""`python -m bench.scheduling [scenario...]` (`make bench-scheduling`): every scenario, or those
named, each printing its figures as it ends; then one table of them all."""

from __future__ import annotations

import sys
from pathlib import Path

from bench.scheduling import affinity, backpressure, caps, cost, fairness, goodput, priority, seed
from bench.scheduling.processes import flush_redis, migrate, recreate_database
from bench.scheduling.scenario import Run
from bench.suite import Suite


def prepare(workdir: Path) -> None:
    recreate_database()
    migrate(workdir)


SUITE = Suite[Run](
    title="scheduling benchmark",
    prog="python -m bench.scheduling",
    scenarios={
        "caps": caps.run,
        "seed": seed.run,
        "fairness": fairness.run,
        "priority": priority.run,
        "backpressure": backpressure.run,
        "affinity": affinity.run,
        "cost": cost.run,
        "goodput": goodput.run,
    },
    open_run=Run,
    prepare=prepare,
    before_each=flush_redis,  # no gateway is running between scenarios
)

if __name__ == "__main__":
    sys.exit(SUITE.main())
