"""`python -m bench.batch_jobs [scenario...]` (`make bench-jobs`): every scenario, or those named,
each printing its figures as it ends; then one table of them all."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench.batch_jobs import crash, prefix_cache, throughput, truth
from bench.batch_jobs.stack import JobsRun, migrate, recreate_database
from bench.scheduling.figures import Figure, table, tally

Scenario = Callable[[JobsRun], Awaitable[list[Figure]]]
SCENARIOS: dict[str, Scenario] = {
    "crash": crash.run,
    "throughput": throughput.run,
    "prefix-cache": prefix_cache.run,
    "truth": truth.run,
}


async def run_scenario(name: str, scenario: Scenario, workdir: Path) -> list[Figure]:
    started = time.monotonic()
    try:
        async with JobsRun(workdir) as bench:
            figures = await scenario(bench)
    except Exception as exc:  # one broken scenario still lets the others report
        traceback.print_exc()
        figures = [Figure(name, "scenario", "runs to the end", f"failed: {type(exc).__name__}: {exc}", False)]
    print(f"\n## {name} ({time.monotonic() - started:.0f} s)\n\n{table(figures)}", flush=True)
    return figures


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.batch_jobs", description=__doc__)
    parser.add_argument(
        "scenarios", nargs="*", help=f"any of {', '.join(SCENARIOS)} (default: all, in this order)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the work dir (configs, logs)")
    parser.add_argument("--out", type=Path, default=None, help="also write the final table to this file")
    args = parser.parse_args(argv)
    unknown = [name for name in args.scenarios if name not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop what was started on a kill
    workdir = Path(tempfile.mkdtemp(prefix="gateway-bench-jobs-"))
    figures: list[Figure] = []
    try:
        recreate_database()
        migrate(workdir)
        for name in args.scenarios or list(SCENARIOS):
            figures += asyncio.run(run_scenario(name, SCENARIOS[name], workdir))
    finally:
        if args.keep:
            print(f"work dir kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    final = f"{table(figures)}\n\n{tally(figures)}"
    print(f"\n# batch jobs benchmark\n\n{final}")
    if args.out is not None:
        args.out.write_text(final + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
