"""Replica affinity helpers: send keyed requests in bulk, then read which replica saw which key.

Each request names its cache key at the start of its user message (`[key-07] document 3`), so the
replicas' recorded bodies tell where every key landed even after the gateway strips the hints.
"""

from __future__ import annotations

import asyncio
import re
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import openai

from tests.support.upstream import RunningUpstream

KEYS = tuple(f"key-{i:02d}" for i in range(20))
_KEY_IN_PROMPT = re.compile(r"^\[(key-\d+)\] ")


def _request(key: str, number: int) -> dict[str, Any]:
    """Even keys travel in the X-Gateway-Cache-Key header, odd ones as OpenAI's prompt_cache_key."""
    request: dict[str, Any] = {
        "model": "llama",
        "messages": [{"role": "user", "content": f"[{key}] document {number}"}],
        "max_tokens": 4,
    }
    if int(key[-2:]) % 2 == 0:
        request["extra_headers"] = {"X-Gateway-Cache-Key": key}
    else:
        request["prompt_cache_key"] = key
    return request


async def _send_all(base_url: str, api_key: str, per_key: int, concurrency: int) -> None:
    client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    gate = asyncio.Semaphore(concurrency)

    async def one(key: str, number: int) -> None:
        async with gate:
            await client.chat.completions.create(**_request(key, number))

    try:
        await asyncio.gather(*(one(key, n) for n in range(per_key) for key in KEYS))
    finally:
        await client.close()


def send_keyed_requests(base_url: str, api_key: str, per_key: int, concurrency: int = 32) -> None:
    """`per_key` chat requests for each of the 20 keys, interleaved, `concurrency` at a time."""
    asyncio.run(_send_all(base_url, api_key, per_key, concurrency))


def placements(replicas: Sequence[RunningUpstream]) -> dict[str, dict[int, int]]:
    """key -> {replica index: requests it received}, from what each replica recorded."""
    seen: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for index, replica in enumerate(replicas):
        for request in replica.requests():
            body = request["body"]
            assert "prompt_cache_key" not in body  # cache_hints auto on a self-hosted server: stripped
            match = _KEY_IN_PROMPT.match(body["messages"][0]["content"])
            assert match is not None, body
            seen[match.group(1)][index] += 1
    return {key: dict(counts) for key, counts in seen.items()}


def home_replicas(seen: dict[str, dict[int, int]]) -> dict[str, int]:
    """The replica each key lives on: the one that got most of its requests. Replica choice is
    consistent hashing with bounded loads, so a key overflows to its next replica while its home
    is loaded past the bound; the home must still take most of the key's requests, and nearly all
    requests must go home."""
    homes = {key: max(counts, key=counts.__getitem__) for key, counts in seen.items()}
    strays = {key: counts for key, counts in seen.items() if 2 * counts[homes[key]] <= sum(counts.values())}
    assert not strays, f"keys without a home replica: {strays}"
    at_home = sum(counts[homes[key]] for key, counts in seen.items())
    total = sum(sum(counts.values()) for counts in seen.values())
    assert at_home >= 0.85 * total, f"only {at_home} of {total} requests went to their key's home: {seen}"
    return homes
