"""How a benchmark suite runs (`python -m bench.scheduling`, `python -m bench.batch_jobs`): every
scenario, or those named, each printing its figures as it ends; then one table of them all."""

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
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from bench.scheduling.figures import Figure, table, tally

R = TypeVar("R")


@dataclass(frozen=True)
class Suite(Generic[R]):
    title: str  # "scheduling benchmark"
    prog: str  # "python -m bench.scheduling"
    scenarios: dict[str, Callable[[R], Awaitable[list[Figure]]]]
    open_run: Callable[[Path], AbstractAsyncContextManager[R]]  # the processes one scenario uses
    prepare: Callable[[Path], None]  # once, before the first scenario (a fresh database)
    before_each: Callable[[], None] = lambda: None

    async def run_scenario(self, name: str, workdir: Path) -> list[Figure]:
        self.before_each()
        started = time.monotonic()
        try:
            async with self.open_run(workdir) as bench:
                figures = await self.scenarios[name](bench)
        except Exception as exc:  # one broken scenario still lets the others report
            traceback.print_exc()
            figures = [
                Figure(name, "scenario", "runs to the end", f"failed: {type(exc).__name__}: {exc}", False)
            ]
        print(f"\n## {name} ({time.monotonic() - started:.0f} s)\n\n{table(figures)}", flush=True)
        return figures

    def parse_args(self, argv: list[str] | None) -> argparse.Namespace:
        parser = argparse.ArgumentParser(prog=self.prog, description=__doc__)
        parser.add_argument(
            "scenarios", nargs="*", help=f"any of {', '.join(self.scenarios)} (default: all, in this order)"
        )
        parser.add_argument("--keep", action="store_true", help="keep the work dir (configs, logs)")
        parser.add_argument("--out", type=Path, default=None, help="also write the final table to this file")
        args = parser.parse_args(argv)
        unknown = [name for name in args.scenarios if name not in self.scenarios]
        if unknown:
            parser.error(f"unknown scenario {', '.join(unknown)}; choose from {', '.join(self.scenarios)}")
        return args

    def main(self, argv: list[str] | None = None) -> int:
        args = self.parse_args(argv)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop what was started on a kill
        workdir = Path(tempfile.mkdtemp(prefix=f"gateway-{self.prog.rsplit('.', 1)[-1]}-"))
        figures: list[Figure] = []
        try:
            self.prepare(workdir)
            for name in args.scenarios or list(self.scenarios):
                figures += asyncio.run(self.run_scenario(name, workdir))
        finally:
            if args.keep:
                print(f"work dir kept: {workdir}")
            else:
                shutil.rmtree(workdir, ignore_errors=True)
        final = f"{table(figures)}\n\n{tally(figures)}"
        print(f"\n# {self.title}\n\n{final}")
        if args.out is not None:
            args.out.write_text(final + "\n")
        return 0
