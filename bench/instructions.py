"""Instructions per request in the serving worker, counted by valgrind's callgrind.

    .venv/bin/python -m bench.instructions [--requests 400] [--flavour json|sse] [--out DIR]

CPU time on a shared machine varies by 10-20% from run to run; the number of instructions the
worker executes for the same requests varies by well under 1%, so it tells whether a change to the
hot path made it cheaper. It counts user-space instructions only: system calls and the kernel's
TCP work are not in it (those are in `bench/run`'s CPU figures).

It starts nginx and one `gateway serve` (one uvicorn worker, PostgreSQL, Redis, the metering
writer process) as `bench/run` does, with the worker under `valgrind --tool=callgrind` and
counting switched off; sends warm-up requests, switches counting on for `--requests` sequential
non-streaming requests (or streams, `--flavour sse`; team key, batch pin, metering), and prints the
instructions per request.

Under valgrind the requests take tens of seconds, and the worker's timers (the circuit-state
refresh from Redis every second) run all the while: their work grew with the run's wall time
(about 3% of the count, more when the machine was busy). So the worker is then counted for as long
again with no requests, and that idle count is subtracted; both are printed.
The callgrind files stay in `--out` for `callgrind_annotate` (`.1`: the requests, `.2`: idle).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.load import chat_body
from bench.nginx import Nginx
from bench.stack import Gateway, free_port

_TOTALS = re.compile(r"^totals:\s+(\d+)", re.MULTILINE)


def _callgrind_control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, stdout=subprocess.DEVNULL)  # noqa: S603, S607


def _send(client: httpx.Client, headers: dict[str, str], body: bytes, count: int) -> None:
    for _ in range(count):
        response = client.post("/v1/chat/completions", content=body, headers=headers)
        response.raise_for_status()


def _totals(path: Path) -> int:
    return sum(int(m.group(1)) for m in _TOTALS.finditer(path.read_text()))


def count(requests: int, warmup: int, flavour: str, out: Path) -> tuple[int, int]:
    """Instructions the worker executed for `requests` requests (after `warmup` of them), and
    while idle for as long afterwards."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("callgrind.out.*"):
        old.unlink()
    valgrind = (
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        f"--callgrind-out-file={out}/callgrind.out.%p",
    )
    nginx = Nginx(out, free_port())
    gateway = Gateway(out, nginx.base_url, prefix=valgrind, ready_timeout_s=300.0)
    nginx.start(None)
    try:
        gateway.start()
        headers = {
            "authorization": f"Bearer {gateway.team_key}",
            "x-gateway-batch": f"instructions-{flavour}",
            "content-type": "application/json",
        }
        body = chat_body(f"bench-{flavour}", flavour == "sse")  # sse: a whole stream, usage included
        with httpx.Client(base_url=gateway.base_url, timeout=60) as client:
            _send(client, headers, body, warmup)
            _callgrind_control("--instr=on", str(gateway.pid))
            started = time.monotonic()
            _send(client, headers, body, requests)
            _callgrind_control("--instr=off", str(gateway.pid))
            busy_s = time.monotonic() - started
            _callgrind_control("--dump", str(gateway.pid))  # .1: the requests
            _callgrind_control("--instr=on", str(gateway.pid))
            time.sleep(busy_s)
            _callgrind_control("--instr=off", str(gateway.pid))
            _callgrind_control("--dump", str(gateway.pid))  # .2: idle for as long
    finally:
        gateway.stop()
        nginx.stop()
    busy = sum(_totals(f) for f in out.glob("callgrind.out.*.1"))
    idle = sum(_totals(f) for f in out.glob("callgrind.out.*.2"))
    return busy, idle


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.instructions", description=__doc__)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument(
        "--flavour", default="json", choices=("json", "sse"), help="json (default), or sse: streams"
    )
    parser.add_argument("--out", type=Path, default=None, help="keep the callgrind files here")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("bench.instructions: valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    out = args.out or Path(tempfile.mkdtemp(prefix="gateway-instructions-"))
    busy, idle = count(args.requests, args.warmup, args.flavour, out)
    print(f"{(busy - idle) / args.requests:,.0f} instructions per request ({args.requests} requests: "
          f"{busy:,} in all, {idle:,} idle for as long); callgrind files in {out}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
