"""One answer per key and team within the window: `IdempotentRequests.serve` runs the first request
of a key, makes its repeats wait for it, replays its answer to them, and refuses (409) a repeat
with another body.

What is kept (docs/metering.md, "Idempotent retries"): a JSON answer, a whole stream, and an error
an upstream gave that a retry would only get again (a 4xx other than 408, 409 and 429). A failure
before any upstream was reached, and one the client should retry (a 5xx, a 429, a timeout), frees
the key instead, so that the retry runs. An answer over `max_answer_bytes` is not kept either: its
retry runs anew. Without a reachable store, a keyed request runs as an unkeyed one.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

import structlog

from gateway.errors import Conflict, GatewayError
from gateway.idempotency.keys import IdempotentRequest
from gateway.idempotency.recording import RecordedStream, StoredStream
from gateway.idempotency.records import Claim, StoredAnswer
from gateway.idempotency.redis_store import RedisIdempotencyStore
from gateway.idempotency.store import IdempotencyStore, MemoryIdempotencyStore, StoreUnavailable
from gateway.proxy.exchange import ProxyResult
from gateway.proxy.relay import StreamRelay
from gateway.redis.client import RedisClient
from gateway.settings import Settings

log = structlog.get_logger("gateway.idempotency")

REPLAY_HEADER = "x-gateway-idempotent-replay"
# The OpenAI and Anthropic SDKs retry a 409 unless told not to: the same request would only get it again.
NO_RETRY = {"x-should-retry": "false"}
RETRY_STATUSES = frozenset({408, 409, 425, 429})  # 4xx a client is told to retry: never kept
FIRST_POLL_S = 0.05  # a waiter looks again after this, then twice as long each time...
MAX_POLL_S = 1.0  # ...up to this (a waiter in the first one's process is woken at once)
RENEWALS_PER_LEASE = 3  # a running first request renews its claim this often a lease


class ErrorAnswer(NamedTuple):
    """An error as its client was answered: what a retry is given again when it is kept."""

    status: int
    headers: dict[str, str]
    body: bytes


class IdempotentRequests:
    def __init__(
        self,
        store: IdempotencyStore,
        window_s: float,
        lease_s: float,
        max_answer_bytes: int,
        *,
        count: Callable[[str], None],
    ) -> None:
        """`count(outcome)` is told what became of each keyed request: `first` (it ran), `replayed`
        (answered from the store), `conflict` (another request under its key: a 409) or
        `store_unavailable` (run as an unkeyed one)."""
        self.store = store
        self.window_s = window_s
        self.lease_s = lease_s  # how long a claim lasts unrenewed: a dead process's, then a repeat runs
        self.max_answer_bytes = max_answer_bytes
        self.count = count
        self._wakeups: dict[str, _Waiters] = {}  # slots this process's requests wait on
        self._running: set[asyncio.Task[Any]] = set()  # first requests, run on if abandoned
        self._renewals: dict[tuple[str, str], asyncio.Task[None]] = {}  # by slot and claim's owner

    async def serve(
        self,
        request: IdempotentRequest,
        request_id: str,
        run: Callable[[], Awaitable[ProxyResult]],
        error_answer: Callable[[GatewayError], ErrorAnswer] | None = None,
    ) -> ProxyResult:
        """The answer to a keyed request: `run()`'s when it is the key's first (kept for its
        repeats), else the first's, replayed; a Conflict (409) for another request under its key.
        `error_answer` renders an upstream's error as the client is answered, to keep it (None: the
        request reaches no upstream, and its errors free the key)."""
        claim = Claim(request.fingerprint, request_id)
        poll_s = FIRST_POLL_S
        while True:
            try:
                held = await self.store.claim(request.slot, claim, self.lease_s)
            except StoreUnavailable:
                self.count("store_unavailable")
                return await run()
            if held is None:
                self.count("first")
                return await self._first(request, claim, run, error_answer)
            if held.fingerprint != request.fingerprint:
                self.count("conflict")
                raise Conflict(
                    "This Idempotency-Key was already used with another request (method, path or "
                    "body) by your team; send a new key for a new request",
                    param="Idempotency-Key",
                    code="idempotency_key_reused",
                    headers=dict(NO_RETRY),
                )
            if isinstance(held, StoredAnswer):
                self.count("replayed")
                log.info(
                    "idempotent_replay", request_id=request_id, replayed=held.headers.get("x-request-id")
                )
                return _replayed(held)
            await self._wait(request.slot, poll_s)  # running: its answer, or its slot freed
            poll_s = min(poll_s * 2, MAX_POLL_S)

    async def _first(
        self,
        request: IdempotentRequest,
        claim: Claim,
        run: Callable[[], Awaitable[ProxyResult]],
        error_answer: Callable[[GatewayError], ErrorAnswer] | None,
    ) -> ProxyResult:
        """Run the key's first request in a task of its own: a client that leaves (or a request
        cancelled) does not stop it, and its answer is kept for the retry. Its claim is renewed
        while it runs, however long that is: only a process that died leaves a claim to expire."""
        self._renewals[(request.slot, claim.owner)] = asyncio.create_task(
            self._renew(request.slot, claim), name="idempotent-claim"
        )
        task = asyncio.create_task(self._run_first(request, claim, run, error_answer), name="idempotent")
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(_detach_stream)  # nobody will relay it: read on and keep it
            raise

    async def _run_first(
        self,
        request: IdempotentRequest,
        claim: Claim,
        run: Callable[[], Awaitable[ProxyResult]],
        error_answer: Callable[[GatewayError], ErrorAnswer] | None,
    ) -> ProxyResult:
        try:
            result = await run()
        except GatewayError as exc:
            kept = exc.logged and exc.status < 500 and exc.status not in RETRY_STATUSES  # an upstream's
            if error_answer is not None and kept:
                answer = error_answer(exc)
                await self._keep(request, claim, answer.status, answer.headers, body=answer.body)
            else:
                await self._release(request, claim)
            raise
        except BaseException:
            await asyncio.shield(self._release(request, claim))
            raise
        if isinstance(result.stream, StreamRelay):
            on_end = functools.partial(self._stream_ended, request, claim, result.headers)
            recorded = RecordedStream(result.stream, self.max_answer_bytes, self.lease_s, on_end)
            self._running.add(recorded.task)
            recorded.task.add_done_callback(self._running.discard)
            return ProxyResult(result.headers, stream=recorded)
        await self._keep(request, claim, result.status, result.headers, body=result.body)
        return result

    async def _keep(
        self,
        request: IdempotentRequest,
        claim: Claim,
        status: int,
        headers: dict[str, str],
        *,
        body: bytes = b"",
        frames: list[bytes] | None = None,
    ) -> None:
        self._stop_renewing(request.slot, claim)
        answer = StoredAnswer(request.fingerprint, status, headers, body, frames)
        if answer.size() > self.max_answer_bytes:
            log.info("idempotent_answer_not_kept", request_id=claim.owner, reason="over max_answer_bytes")
            await self._release(request, claim)
            return
        await self.store.keep(request.slot, claim, answer, self.window_s)
        self._wake(request.slot)

    async def _stream_ended(
        self, request: IdempotentRequest, claim: Claim, headers: dict[str, str], chunks: list[bytes] | None
    ) -> None:
        """A keyed stream has ended (and been metered): keep its chunks, or free its key."""
        if chunks is None:
            await self._release(request, claim)
        else:
            await self._keep(request, claim, 200, headers, frames=chunks)

    async def _release(self, request: IdempotentRequest, claim: Claim) -> None:
        self._stop_renewing(request.slot, claim)
        await self.store.release(request.slot, claim)
        self._wake(request.slot)

    async def _renew(self, slot: str, claim: Claim) -> None:
        while True:
            await asyncio.sleep(self.lease_s / RENEWALS_PER_LEASE)
            await self.store.renew(slot, claim, self.lease_s)

    def _stop_renewing(self, slot: str, claim: Claim) -> None:
        renewal = self._renewals.pop((slot, claim.owner), None)
        if renewal is not None:
            renewal.cancel()

    async def _wait(self, slot: str, timeout_s: float) -> None:
        """Until this process's first request of `slot` ends, or `timeout_s` (one in another
        process is polled for)."""
        waiters = self._wakeups.get(slot)
        if waiters is None:
            waiters = self._wakeups[slot] = _Waiters()
        waiters.count += 1
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiters.event.wait(), timeout_s)
        finally:
            waiters.count -= 1
            if not waiters.count and self._wakeups.get(slot) is waiters:
                del self._wakeups[slot]  # nobody left waiting: nothing kept for a slot

    def _wake(self, slot: str) -> None:
        waiters = self._wakeups.pop(slot, None)
        if waiters is not None:
            waiters.event.set()


class _Waiters:
    """This process's requests waiting for one slot's first request."""

    __slots__ = ("count", "event")

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.count = 0


def _replayed(answer: StoredAnswer) -> ProxyResult:
    headers = answer.headers | {REPLAY_HEADER: "true"}
    if answer.frames is not None:
        return ProxyResult(headers, stream=StoredStream(answer.frames), status=answer.status)
    return ProxyResult(headers, body=answer.body, status=answer.status)


def _detach_stream(task: asyncio.Task[ProxyResult]) -> None:
    if not task.cancelled() and task.exception() is None and isinstance(task.result().stream, RecordedStream):
        task.result().stream.detach()  # type: ignore[union-attr]


def open_idempotency(
    settings: Settings, redis: RedisClient | None, count: Callable[[str], None]
) -> IdempotentRequests:
    """Slots in Redis when the gateway has one (every process sees them), else in this process."""
    store: IdempotencyStore = RedisIdempotencyStore(redis) if redis is not None else MemoryIdempotencyStore()
    return IdempotentRequests(
        store,
        settings.idempotency_window_s,
        settings.idempotency_lease_s,
        settings.idempotency_max_answer_bytes,
        count=count,
    )
