"""`make bench`: nginx as the upstream, the gateway with PostgreSQL and Redis, wrk as the load.

Prints, for direct and through-the-gateway, non-streaming and streaming, at each connection count:
requests/s, p50/p90/p99, the serving process's CPU per request and its peak RSS; then the 50 ms
upstream at 256 connections, time to first token, 1,000 concurrent streams through one worker and
the metering writer; last, each target of the benchmark against this run's figures (met, missed,
or not measured when its section was skipped). Everything it starts it stops, whatever happens.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.load import chat_body, lua_script, run_wrk
from bench.nginx import Nginx
from bench.procstat import TreeMeter
from bench.report import Extras, Row, key_values, matrix, targets
from bench.stack import REDIS_URL, REPO, Gateway, free_port

MODES = (("non-streaming", "json", False), ("streaming", "sse", True))
WRITER_RATE = re.compile(r"wrote \d+ records in [\d.]+s \(([\d,]+) records/s\)")  # bench/metering_writer.py


class Bench:
    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        two_cpus = (os.cpu_count() or 1) >= 2
        # One worker: the gateway alone on one core, nginx and the load generators on the other.
        # Several workers: spread over every core (the load's core too), as the OS schedules them.
        self.gateway_cpus = "0" if two_cpus and args.workers == 1 else None
        self.load_cpus = "1" if two_cpus else None
        self.nginx = Nginx(workdir, free_port())
        self.gateway = Gateway(workdir, self.nginx.base_url, args.workers, args.server, self.gateway_cpus)
        self.extras = Extras()  # the figures after the wrk matrix, for the targets' table

    def script(self, target: str, flavour: str, stream: bool) -> tuple[str, Path]:
        """(base URL, Lua script) for one target: nginx directly, or the gateway with key and batch."""
        path = self.workdir / f"{target}-{flavour}.lua"
        if target == "direct":
            path.write_text(lua_script(f"/{flavour}/v1/chat/completions", chat_body("direct", stream), {}))
            return self.nginx.base_url, path
        headers = {"Authorization": f"Bearer {self.gateway.team_key}", "X-Gateway-Batch": f"bench-{flavour}"}
        path.write_text(lua_script("/v1/chat/completions", chat_body(f"bench-{flavour}", stream), headers))
        return self.gateway.base_url, path

    def measure(self, target: str, mode: str, flavour: str, stream: bool, connections: int) -> Row:
        url, script = self.script(target, flavour, stream)
        run_wrk(url, script, connections, 1, self.load_cpus)  # warm-up: pools, caches, the pin
        assert self.nginx.process is not None
        meter = TreeMeter(self.nginx.process.pid if target == "direct" else self.gateway.pid)
        meter.start()
        result = run_wrk(url, script, connections, self.args.duration, self.load_cpus)
        row = Row(target, mode, connections, result, meter.stop())
        print(matrix([row]).splitlines()[-1], flush=True)
        return row

    def wrk_matrix(self) -> list[Row]:
        """Each section on a new gateway process: httpcore's pool keeps every connection a burst
        opened, and its per-request scan of the pool would carry one section's cost into the next."""
        rows = []
        for mode, flavour, stream in MODES:
            if flavour not in self.args.modes:
                continue
            self.gateway.restart()
            for target in self.args.targets:
                for connections in self.args.connections:
                    rows.append(self.measure(target, mode, flavour, stream, connections))
        if "slow" in self.args.modes:
            self.gateway.restart()
            for target in self.args.targets:
                rows.append(self.measure(target, "50 ms upstream", "slow", False, 256))
        return rows

    def streams_client(self, *argv: str) -> dict[str, float]:
        command = [sys.executable, "-m", "bench.streams", *argv]
        if self.load_cpus:
            command = ["taskset", "-c", self.load_cpus, *command]
        out = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=True, timeout=300)  # noqa: S603
        result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
        return result

    def gateway_headers(self, flavour: str) -> list[str]:
        return ["--header", f"authorization:Bearer {self.gateway.team_key}",
                "--header", f"x-gateway-batch:bench-{flavour}"]  # fmt: skip

    def ttft(self) -> list[tuple[str, str]]:
        """Sequential streams from the drip location (20 ms between chunks): first content chunk."""
        direct = self.streams_client("ttft", self.nginx.url("drip"), "--model", "direct")
        through = self.streams_client(
            "ttft", self.gateway.base_url + "/v1/chat/completions", "--model", "bench-drip",
            *self.gateway_headers("drip"),
        )  # fmt: skip
        added = self.extras.added_ttft_ms = through["p50_ms"] - direct["p50_ms"]
        return [
            ("direct TTFT p50 / p99 ms", f"{direct['p50_ms']:.2f} / {direct['p99_ms']:.2f}"),
            ("gateway TTFT p50 / p99 ms", f"{through['p50_ms']:.2f} / {through['p99_ms']:.2f}"),
            ("added TTFT p50 ms (target <= 1)", f"{added:.2f}"),
        ]

    def hold_streams(self) -> list[tuple[str, str]]:
        """1,000 streams at once through one worker, each ~10 s long (1 s between chunks)."""
        meter = TreeMeter(self.gateway.pid)
        meter.start()
        result = self.streams_client(
            "hold", self.gateway.base_url + "/v1/chat/completions", "--model", "bench-hold",
            "--streams", str(self.args.streams), *self.gateway_headers("hold"),
        )  # fmt: skip
        usage = meter.stop()
        self.extras.streams, self.extras.streams_failed = int(result["streams"]), int(result["failed"])
        self.extras.streams_peak_rss_mb = usage.peak_rss_mb
        return [
            ("streams requested / open at once / failed",
             f"{result['streams']:.0f} / {result['peak_open']:.0f} / {result['failed']:.0f}"),
            ("wall time s", f"{result['seconds']:.1f}"),
            ("gateway peak RSS MB (target < 150)", f"{usage.peak_rss_mb:.0f}"),
            ("gateway CPU ms per stream", f"{usage.cpu_s * 1000 / result['streams']:.2f}"),
        ]  # fmt: skip

    def metering(self, requests_sent: int) -> list[tuple[str, str]]:
        """Usage records the gateway wrote during the run; then the writer's own throughput."""
        written, deadline = -1, time.monotonic() + 30
        while time.monotonic() < deadline:
            now = self.gateway.usage_records()
            if now == written:
                break
            written = now
            time.sleep(1)
        pairs = [("gateway requests measured by wrk / usage records in PostgreSQL",
                  f"{requests_sent:,} / {written:,} (records include warm-ups and streams)")]  # fmt: skip
        writer = REPO / "bench" / "metering_writer.py"
        if not writer.exists():
            return [*pairs, ("metering writer records/s", "bench/metering_writer.py not found")]
        command = [sys.executable, str(writer), "--redis-url", REDIS_URL]
        out = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)  # noqa: S603
        lines = (out.stdout.strip() or out.stderr.strip() or "no output").splitlines()
        rate = WRITER_RATE.search(out.stdout)
        self.extras.writer_records_s = float(rate.group(1).replace(",", "")) if rate else None
        return [*pairs, ("metering writer (bench/metering_writer.py)", "; ".join(lines[-2:]))]

    def run(self) -> str:
        self.nginx.start(self.load_cpus)
        self.gateway.start()
        print(f"gateway pid {self.gateway.pid} ({self.args.server}, {self.args.workers} worker(s)); "
              f"work dir {self.workdir}", flush=True)  # fmt: skip
        # Time to first token first, on a quiet machine: after the wrk matrix, PostgreSQL (which
        # shares these cores here, and would be on a host of its own in production) vacuums and
        # checkpoints the ~200,000 records just written, and that shows in a sub-millisecond figure.
        ttft = None if self.args.skip_extras else self.ttft()
        rows = self.wrk_matrix()
        sections = [matrix(rows)]
        if ttft is not None:
            self.gateway.restart()
            sections.append(key_values("time to first token (200 sequential streams)", ttft))
            sections.append(key_values(f"{self.args.streams} concurrent streams, one worker",
                                       self.hold_streams()))  # fmt: skip
            sent = sum(r.wrk.requests for r in rows if r.target == "gateway")
            sections.append(key_values("metering", self.metering(sent)))
        sections.append(targets(rows, self.extras))
        return "\n\n".join(sections)

    def stop(self) -> None:
        self.gateway.stop()
        self.nginx.stop()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/run", description=__doc__)
    parser.add_argument("--duration", type=int, default=8, help="seconds per wrk run (default 8)")
    parser.add_argument("--connections", default="1,16,64,256", type=lambda s: [int(c) for c in s.split(",")])
    parser.add_argument("--workers", type=int, default=int(os.environ.get("GATEWAY_WORKERS", "1")))
    parser.add_argument("--server", choices=("uvicorn", "granian"), default="uvicorn")
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument(
        "--modes",
        default="json,sse,slow",
        type=lambda s: s.split(","),
        help="wrk sections: json (non-streaming), sse (streaming), slow (50 ms upstream)",
    )
    parser.add_argument("--targets", default="direct,gateway", type=lambda s: s.split(","))
    parser.add_argument("--skip-extras", action="store_true", help="only the wrk matrix")
    parser.add_argument("--out", type=Path, default=None, help="also write the tables to this file")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (logs, configs, scripts)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally below on a kill
    workdir = Path(tempfile.mkdtemp(prefix="gateway-bench-"))
    workdir.chmod(0o755)  # nginx's worker reads the canned files
    bench = Bench(args, workdir)
    try:
        tables = bench.run()
    finally:
        bench.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print("\n" + tables)
    if args.out is not None:
        args.out.write_text(tables + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
