"""The gateway's upstream pool (`gateway.dispatch.http1.pool`) against httpx (httpcore), httpx-aiohttp
and bare aiohttp.

Each client sends the same POST to nginx the way the executor does (`send(stream=True)`, read the
body, close), N requests with C in flight, on uvloop; we report requests/s and the client process's
CPU per request, which is what the gateway pays for its upstream leg.

`python -m bench.transports URL [--requests 10000] [--concurrency 1,64]` prints one JSON line a run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable

import httpx

from bench.load import chat_body

Send = Callable[[], Awaitable[int]]


def httpx_sender(client: httpx.AsyncClient, url: str, body: bytes) -> Send:
    headers = {"content-type": "application/json", "authorization": "Bearer bench"}

    async def send() -> int:
        request = client.build_request("POST", url, content=body, headers=headers)
        response = await client.send(request, stream=True)
        try:
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
        finally:
            await response.aclose()
        return size

    return send


async def drive(send: Send, requests: int, concurrency: int) -> dict[str, float]:
    remaining = requests

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await send()

    for _ in range(50):  # warm the pool
        await send()
    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"rps": requests / wall, "cpu_us_per_request": cpu / requests * 1e6}


async def run_one(kind: str, url: str, requests: int, concurrency: int) -> dict[str, float]:
    body = chat_body("bench-json", stream=False)
    limits = httpx.Limits(max_connections=4096, max_keepalive_connections=1024, keepalive_expiry=60)
    if kind == "gateway":
        from gateway.dispatch.http1.pool import UpstreamPool

        pool = UpstreamPool()
        headers = {"content-type": "application/json", "authorization": "Bearer bench"}

        async def send_pooled() -> int:
            reply = await pool.request("POST", url, headers, body, connect_timeout=5, read_timeout=30)
            size = 0
            async for chunk in reply.chunks():
                size += len(chunk)
            await reply.aclose()
            return size

        try:
            return await drive(send_pooled, requests, concurrency)
        finally:
            await pool.aclose()
    if kind == "aiohttp":
        import aiohttp

        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=4096)) as session:

            async def send() -> int:
                headers = {"content-type": "application/json", "authorization": "Bearer bench"}
                async with session.post(url, data=body, headers=headers) as response:
                    return len(await response.read())

            return await drive(send, requests, concurrency)
    transport: httpx.AsyncBaseTransport | None = None
    if kind == "httpx-aiohttp":
        from httpx_aiohttp import AiohttpTransport

        transport = AiohttpTransport(limits=limits)
    async with httpx.AsyncClient(limits=limits, transport=transport) as client:
        return await drive(httpx_sender(client, url, body), requests, concurrency)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.transports")
    parser.add_argument("url")
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--concurrency", default="1,64")
    parser.add_argument("--kinds", default="gateway,httpx,httpx-aiohttp,aiohttp")
    args = parser.parse_args(argv)
    import uvloop

    for kind in args.kinds.split(","):
        for concurrency in (int(c) for c in args.concurrency.split(",")):
            result = uvloop.run(run_one(kind, args.url, args.requests, concurrency))
            print(json.dumps({"transport": kind, "concurrency": concurrency, **result}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
