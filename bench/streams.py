"""Streaming clients: time to first token, direct and through the gateway, and many streams at once.

Run as a module so it can be pinned to its own CPU:
`python -m bench.streams ttft URL --n 200 [--header K:V ...]` and
`python -m bench.streams hold URL --streams 1000 [--header K:V ...]`; each prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time

import httpx

from bench.load import chat_body


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else 0.0


async def first_token_s(client: httpx.AsyncClient, url: str, body: bytes, headers: dict[str, str]) -> float:
    """Seconds from sending the request to the first frame carrying content, then drain the stream."""
    started = time.perf_counter()
    ttft: float | None = None
    async with client.stream("POST", url, content=body, headers=headers) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if ttft is None and '"content":"' in line and '"content":""' not in line:
                ttft = time.perf_counter() - started
    if ttft is None:
        raise RuntimeError("the stream carried no content")
    return ttft


async def measure_ttft(url: str, model: str, headers: dict[str, str], n: int) -> dict[str, float]:
    """Sequential streams on one keep-alive connection; milliseconds."""
    body = chat_body(model, stream=True)
    headers = headers | {"content-type": "application/json"}
    async with httpx.AsyncClient(timeout=30) as client:
        for _ in range(5):  # warm the connection and the gateway's key cache and pin
            await first_token_s(client, url, body, headers)
        samples = [await first_token_s(client, url, body, headers) * 1000 for _ in range(n)]
    return {"p50_ms": statistics.median(samples), "p90_ms": percentile(samples, 0.9),
            "p99_ms": percentile(samples, 0.99), "n": n}  # fmt: skip


async def hold_streams(url: str, model: str, headers: dict[str, str], streams: int) -> dict[str, float]:
    """Open `streams` streams at once and read them to the end; report how many were open together."""
    body = chat_body(model, stream=True)
    headers = headers | {"content-type": "application/json"}
    open_now = peak_open = failed = 0
    limits = httpx.Limits(max_connections=streams, max_keepalive_connections=streams)

    async def one(client: httpx.AsyncClient) -> None:
        nonlocal open_now, peak_open, failed
        try:
            async with client.stream("POST", url, content=body, headers=headers) as response:
                if response.status_code != 200:
                    failed += 1
                    return
                open_now += 1
                peak_open = max(peak_open, open_now)
                try:
                    async for _ in response.aiter_raw():
                        pass
                finally:
                    open_now -= 1
        except httpx.HTTPError:
            failed += 1

    started = time.perf_counter()
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        await asyncio.gather(*(one(client) for _ in range(streams)))
    return {"streams": streams, "peak_open": peak_open, "failed": failed,
            "seconds": time.perf_counter() - started}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.streams")
    parser.add_argument("what", choices=("ttft", "hold"))
    parser.add_argument("url")
    parser.add_argument("--model", required=True)
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--header", action="append", default=[], help="K:V, repeatable")
    args = parser.parse_args(argv)
    headers = dict(h.split(":", 1) for h in args.header)
    import uvloop

    if args.what == "ttft":
        result = uvloop.run(measure_ttft(args.url, args.model, headers, args.n))
    else:
        result = uvloop.run(hold_streams(args.url, args.model, headers, args.streams))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
