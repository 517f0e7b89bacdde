"""The clients of the scenarios: the official `openai` SDK (AsyncOpenAI, no retries, one shared
connection pool), each request recorded as an `Outcome` with the gateway's `x-gateway-queue-ms`,
the time to first token of streams, and the usage the answer reported."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import httpx2
import openai
from openai.types.chat import ChatCompletionMessageParam

QUEUE_HEADER = "x-gateway-queue-ms"


@dataclass(frozen=True, slots=True)
class Chat:
    """One chat request as a scenario builds it."""

    messages: list[dict[str, str]]
    max_tokens: int
    headers: dict[str, str] = field(default_factory=dict)
    stream: bool = False


@dataclass(frozen=True, slots=True)
class Outcome:
    label: str  # the team, class or phase the scenario sent it as
    started: float  # time.monotonic()
    ended: float
    error: str | None = None  # None: a 2xx answer; else the status and code, or the exception's class
    queue_ms: float | None = None
    ttft_s: float | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def latency_s(self) -> float:
        return self.ended - self.started

    @property
    def served_tokens(self) -> int:
        """What fairness counts: uncached prompt tokens plus completion tokens."""
        return self.prompt_tokens - self.cached_tokens + self.completion_tokens


def pool(connections: int = 2048) -> openai.DefaultAioHttpClient:
    """One HTTP client for every SDK client of a scenario, with room for its whole concurrency.

    The SDK's aiohttp client rather than its default: httpcore's pool looks at every connection
    for each request, which at 500 connections costs the client several milliseconds of CPU per
    request, on the cores the gateway and the simulator need."""
    limits = httpx2.Limits(max_connections=connections, max_keepalive_connections=connections)
    return openai.DefaultAioHttpClient(limits=limits, timeout=300.0)


class Target:
    """Where a scenario sends chats: a base URL (the gateway's /v1 or a replica's), a key, a model."""

    def __init__(self, http: openai.DefaultAioHttpClient, base_url: str, api_key: str, model: str) -> None:
        self.client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, http_client=http)
        self.model = model

    async def send(self, chat: Chat, label: str) -> Outcome:
        started = time.monotonic()
        try:
            if chat.stream:
                return await self._stream(chat, label, started)
            raw = await self.client.chat.completions.with_raw_response.create(
                model=self.model,
                messages=_messages(chat),
                max_tokens=chat.max_tokens,
                extra_headers=chat.headers,
            )
            completion = raw.parse()
        except openai.APIStatusError as exc:
            error = f"{exc.status_code} {_error_code(exc.body)}".strip()
            return Outcome(label, started, time.monotonic(), error, _queue_ms(exc.response.headers))
        except (openai.APIError, OSError) as exc:
            return Outcome(label, started, time.monotonic(), type(exc).__name__)
        return _answered(label, started, raw.headers, None, completion.usage)

    async def _stream(self, chat: Chat, label: str, started: float) -> Outcome:
        raw = await self.client.chat.completions.with_raw_response.create(
            model=self.model,
            messages=_messages(chat),
            max_tokens=chat.max_tokens,
            extra_headers=chat.headers,
            stream=True,
            stream_options={"include_usage": True},
        )
        first: float | None = None
        usage: Any = None
        async for chunk in raw.parse():
            if first is None and chunk.choices and chunk.choices[0].delta.content:
                first = time.monotonic()
            usage = chunk.usage or usage
        return _answered(label, started, raw.headers, None if first is None else first - started, usage)

    async def warm_up(self) -> None:
        """One small request before anything is measured: connections, the gateway's key cache."""
        outcome = await self.send(Chat([{"role": "user", "content": "Warm up."}], 1), "warm-up")
        if not outcome.ok:
            raise RuntimeError(f"the warm-up request failed: {outcome.error}")


def _messages(chat: Chat) -> list[ChatCompletionMessageParam]:
    return cast("list[ChatCompletionMessageParam]", chat.messages)


def _answered(label: str, started: float, headers: Any, ttft_s: float | None, usage: Any) -> Outcome:
    return Outcome(
        label,
        started,
        time.monotonic(),
        None,
        _queue_ms(headers),
        ttft_s,
        usage.prompt_tokens if usage else 0,
        _cached(usage),
        usage.completion_tokens if usage else 0,
    )


def _queue_ms(headers: Any) -> float | None:
    value = headers.get(QUEUE_HEADER)
    try:
        return None if value is None else float(value)
    except ValueError:
        return None


def _cached(usage: Any) -> int:
    details = getattr(usage, "prompt_tokens_details", None)
    return int(getattr(details, "cached_tokens", 0) or 0)


def _error_code(body: object) -> str:
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            return str(error.get("code") or error.get("type") or "")
    return ""


async def run_all(target: Target, chats: Sequence[tuple[str, Chat]], concurrency: int) -> list[Outcome]:
    """Send every (label, chat) with at most `concurrency` outstanding, in order."""
    outcomes: list[Outcome] = []
    pending = iter(chats)

    async def worker() -> None:
        for label, chat in pending:
            outcomes.append(await target.send(chat, label))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return outcomes


async def flood(
    send: Callable[[int], Awaitable[Outcome]],
    concurrency: int,
    going: Callable[[], bool],
    outcomes: list[Outcome],
) -> None:
    """`concurrency` clients each sending back to back while `going()`; `send` gets a running
    number so that every request can be made unique."""
    counter = itertools.count()

    async def client() -> None:
        while going():
            outcomes.append(await send(next(counter)))

    await asyncio.gather(*(client() for _ in range(concurrency)))


def until(deadline: float) -> Callable[[], bool]:
    """A `going` for `flood`: until time.monotonic() reaches `deadline`."""
    return lambda: time.monotonic() < deadline


async def trickle(
    send: Callable[[int], Awaitable[Outcome]], per_second: float, until: float, outcomes: list[Outcome]
) -> None:
    """Requests at a fixed rate until `until`, whether or not the earlier ones have answered."""
    tasks: list[asyncio.Task[None]] = []

    async def one(number: int) -> None:
        outcomes.append(await send(number))

    start, number = time.monotonic(), 0
    while (due := start + number / per_second) < until:
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        tasks.append(asyncio.create_task(one(number)))
        number += 1
    await asyncio.gather(*tasks)


def errors(outcomes: Sequence[Outcome]) -> dict[str, int]:
    """The failures by kind: {"429 queue_timeout": 3, "APIConnectionError": 1}."""
    counts: dict[str, int] = {}
    for outcome in outcomes:
        if outcome.error is not None:
            counts[outcome.error] = counts.get(outcome.error, 0) + 1
    return counts


def error_text(outcomes: Sequence[Outcome]) -> str:
    counts = errors(outcomes)
    total = sum(counts.values())
    if not total:
        return "0"
    kinds = ", ".join(f"{kind}: {count}" for kind, count in sorted(counts.items(), key=lambda kv: -kv[1]))
    return f"{total} ({kinds})"
