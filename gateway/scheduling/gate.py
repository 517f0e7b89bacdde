"""One replica's admission: its caps, its queue, and the pump that dispatches the queue.

A request goes straight through when nothing waits before it and a permit is free; otherwise it
waits in the replica's `FairQueue`. One pump task per replica, alive while the queue is not empty,
hands out permits in the queue's order: it wakes when a permit comes back here, when the server's
load is read again, or when another process frees a permit shared through Redis (its bank's
subscription; the bank's long poll only bounds a lost message). A waiter that times out or whose client leaves takes itself out.

Work-conserving: batch work leaves `interactive_reserve` of the capacity (slots of
`max_concurrency`, and of the learned KV budget) free only while interactive work is about (in
flight or waiting here, or seen within `reserve_idle_s`); otherwise the reserve is lent to it. An
interactive arrival takes the next free slot first (the queue's order).

Interactive prefill first: while an interactive request sent here has not had its first token,
no batch request is sent here, for at most `interactive_prefill_guard_s` from the moment the first
of them was sent (so a steady stream of interactive requests cannot starve batch work). A
continuous-batching server prefills the prompts that arrive together in the same steps, and a
step's time grows with the tokens it prefills: batch prompts arriving beside an interactive one
lengthen the step its first token waits for (on the simulated vLLM, a p99 TTFT 1.95x the one
alone). A freed slot idles for that window at most, a few dozen milliseconds a time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog
from redis.exceptions import RedisError

from gateway.errors import QueueFull, QueueTimeout
from gateway.providers.base import TokenUsage
from gateway.routing.directives import Priority
from gateway.scheduling.fair_queue import AGING_PASSES, FairQueue, Waiter
from gateway.scheduling.in_flight import InFlight
from gateway.scheduling.permits import Caps, PermitBank, fits
from gateway.scheduling.server_load import ServerLoad
from gateway.scheduling.ticket import Ticket

log = structlog.get_logger("gateway.scheduling")
LOCAL_POLL_S = 1.0  # a local bank tells the pump itself; this only bounds a missed wake-up
DEGRADED_RETRY_S = (
    1.0  # how long caps hold per process after the shared bank failed, before it is asked again
)


@dataclass(frozen=True, slots=True)
class Permit:
    bank: PermitBank | None  # where to give it back; None: counted by this process alone
    tokens: int = 0  # what it holds of max_tokens_in_flight


@dataclass(eq=False, slots=True)
class Grant:
    """A permit to send one request to `base_url`; `release` it when the request has ended."""

    base_url: str
    queue_s: float = 0.0  # how long the request waited for it
    gate: ReplicaGate | None = None
    ticket: Ticket | None = None
    bank: PermitBank | None = None  # the shared bank the permit came from, if any
    released: bool = False
    prefilling: bool = False  # an interactive request before its first token (batch work waits)

    def first_token(self) -> None:
        """The upstream's first token (or first frames) came: batch work may be sent again."""
        if self.gate is not None:
            self.gate.prefill_over(self)

    def release(self, usage: TokenUsage | None = None) -> None:
        """Give the permit back (idempotent); `usage`: what the request really used, if known."""
        if self.released:
            return
        self.released = True
        if self.gate is not None:
            self.gate.give_back(self, usage)


def batch_caps(caps: Caps, interactive_reserve: float) -> Caps:
    """The caps batch work sees: the concurrency less the slots kept for interactive arrivals."""
    if caps.max_concurrency is None:
        return caps
    kept = int(caps.max_concurrency * interactive_reserve)
    return Caps(max(1, caps.max_concurrency - kept), caps.max_tokens_in_flight)


class ReplicaGate:
    def __init__(
        self,
        provider: str,
        url: str,
        caps: Caps,
        bank: PermitBank | None = None,
        *,
        batch_share: float,
        interactive_reserve: float = 0.0,
        reserve_idle_s: float = 1.0,
        prefill_guard_s: float = 0.0,
        aging_passes: int = AGING_PASSES,
        load: ServerLoad | None = None,
        observe_wait: Callable[[str, float], None] = lambda priority, seconds: None,
    ) -> None:
        self.provider, self.url, self.caps = provider, url, caps
        self._batch_caps = batch_caps(caps, interactive_reserve)
        self._batch_kv_share = 1.0 - interactive_reserve
        self._reserve_idle_s = reserve_idle_s
        self._interactive_in_flight = 0
        self._prefill_guard_s = prefill_guard_s
        self._prefilling = 0  # interactive requests sent here and not yet at their first token
        self._guard_until = 0.0  # batch work waits for them until then
        self._interactive_until = 0.0  # the reserve is kept for interactive work until then
        self.queue = FairQueue(batch_share, aging_passes)
        # Counted from the ask for a permit to its release, so that requests arriving during a
        # shared bank's round trip see it
        self.held = InFlight()
        self.server_load = load
        self._bank = bank  # None: this process's own counts are the whole truth
        self._degraded_until = 0.0  # the shared bank failed: this process counts alone until then
        self._observe_wait = observe_wait
        self._wake = asyncio.Event()
        self._pump: asyncio.Task[None] | None = None
        if bank is not None:  # a permit freed in another process wakes the pump too
            bank.watch(url, self.wake)

    @property
    def in_flight(self) -> int:
        """Requests this process holds permits for here (or is asking for)."""
        return self.held.count

    @property
    def tokens_in_flight(self) -> int:
        """What they hold of `max_tokens_in_flight`: a shared prefix counted once."""
        return self.held.tokens

    @property
    def load(self) -> int:
        """What this process has in flight and waiting here: the measure replica choice balances."""
        return self.in_flight + len(self.queue)

    def wake(self) -> None:
        self._wake.set()

    async def enter(self, ticket: Ticket, timeout_s: float, queue_full: Callable[[], bool]) -> Grant:
        """A grant for this replica, now or after waiting in the queue; QueueTimeout after
        `timeout_s`, QueueFull when it would wait and `queue_full()`. The caller's cancellation
        (its client left) takes it out of the queue."""
        if ticket.priority is Priority.INTERACTIVE:
            self._interactive_until = time.monotonic() + self._reserve_idle_s
        if not self.queue:
            permit = await self._try(ticket, waiting=0)
            if permit is not None:
                return self._granted(ticket, permit, 0.0)
        if queue_full():
            raise QueueFull(
                f"Provider '{self.provider}' has as many requests waiting as scheduling.max_queued "
                "allows; it was not sent. Retry later.",
                headers={"retry-after": "1"},
            )
        loop = asyncio.get_running_loop()
        waiter = Waiter(ticket, time.monotonic(), loop.create_future())
        reply = waiter.reply
        self.queue.push(waiter)
        self._wake.set()
        if self._pump is None:
            self._pump = asyncio.create_task(self._run_pump(), name=f"gate-{self.provider}")
        try:
            async with asyncio.timeout(timeout_s):
                grant: Grant = await reply
        except BaseException as exc:
            self.queue.remove(waiter)
            if reply.done() and not reply.cancelled() and reply.exception() is None:
                reply.result().release()  # granted as it gave up: the permit goes to the next
            if isinstance(exc, TimeoutError):
                waited = time.monotonic() - waiter.enqueued_at
                raise QueueTimeout(
                    f"The request waited {timeout_s:g} s for capacity at provider '{self.provider}' "
                    f"({ticket.priority.value} queue); it was not sent. Retry later.",
                    headers={"retry-after": "1", "x-gateway-queue-ms": f"{waited * 1000:.3f}"},
                ) from None
            raise
        return grant

    async def _try(self, ticket: Ticket, waiting: int) -> Permit | None:
        """A permit now (from the shared bank, or counted here alone), or None.

        The server's load is checked and the request counted before the bank is asked: the
        requests that arrive during that round trip must see this one, or a burst passes at once."""
        if ticket.priority is Priority.BATCH and self._guarded():
            return None
        keep_reserve = ticket.priority is Priority.BATCH and self._reserve_kept()
        load = self.server_load
        if load is not None:
            if not load.may_dispatch(ticket, self._batch_kv_share if keep_reserve else 1.0):
                return None
            load.dispatched()
        caps = self._batch_caps if keep_reserve else self.caps
        tokens = self.held.hold(ticket)
        permit = None
        try:
            permit = await self._permit(tokens, caps, waiting)
        finally:  # refused, or the caller cancelled during the bank's round trip
            if permit is None:
                self.held.drop(ticket)
                if load is not None:
                    load.withdrawn()
        return permit

    def _reserve_kept(self) -> bool:
        """Whether batch work leaves the interactive reserve free now: only while interactive work
        is about; otherwise it is lent to batch work (no slot idles that nobody wants)."""
        return (
            self._interactive_in_flight > 0
            or self.queue.waiting(Priority.INTERACTIVE) > 0
            or time.monotonic() < self._interactive_until
        )

    async def _permit(self, tokens: int, caps: Caps, waiting: int) -> Permit | None:
        """A permit for a request already counted in `held`, holding `tokens`."""
        if self._bank is not None and time.monotonic() >= self._degraded_until:
            try:
                granted = await self._bank.acquire(self.url, tokens, caps, waiting)
            except (RedisError, OSError) as exc:
                self._degraded_until = time.monotonic() + DEGRADED_RETRY_S
                log.warning(
                    "capacity_permits_degraded",
                    provider=self.provider,
                    error=type(exc).__name__,
                    detail="Redis unreachable: caps hold per process until it answers again",
                )
            else:
                return Permit(self._bank, tokens) if granted else None
        # No shared bank, or it is unreachable: what this process has in flight here decides.
        held = self.held
        fitting = fits(caps, held.count - 1, held.tokens - tokens, tokens)
        return Permit(None, tokens) if fitting else None

    def _granted(self, ticket: Ticket, permit: Permit, waited_s: float) -> Grant:
        grant = Grant(self.url, waited_s, self, ticket, permit.bank)
        if ticket.priority is Priority.INTERACTIVE:
            self._interactive_in_flight += 1
            if self._prefill_guard_s > 0:
                if not self._prefilling:  # a new window; its end wakes the pump
                    self._guard_until = time.monotonic() + self._prefill_guard_s
                    asyncio.get_running_loop().call_later(self._prefill_guard_s, self._wake.set)
                grant.prefilling = True
                self._prefilling += 1
        self.queue.started(ticket)
        self._observe_wait(ticket.priority.value, waited_s)
        return grant

    def _guarded(self) -> bool:
        """Whether batch work waits for an interactive request's first token now."""
        return self._prefilling > 0 and time.monotonic() < self._guard_until

    def prefill_over(self, grant: Grant) -> None:
        """`grant`'s request had its first token, or ended."""
        if grant.prefilling:
            grant.prefilling = False
            self._prefilling -= 1
            if not self._prefilling:
                self._wake.set()

    def give_back(self, grant: Grant, usage: TokenUsage | None) -> None:
        ticket = grant.ticket
        assert ticket is not None
        self.prefill_over(grant)
        freed = self.held.drop(ticket)
        if grant.bank is not None:
            grant.bank.release(self.url, freed)
        if ticket.priority is Priority.INTERACTIVE:
            self._interactive_in_flight -= 1
            self._interactive_until = time.monotonic() + self._reserve_idle_s
        if self.server_load is not None:
            self.server_load.completed()
            if usage is not None:  # the prompt estimate, checked against the server's count
                self.server_load.capacity.learn_prompt(ticket.prompt_tokens, usage.prompt_tokens)
        served = None  # the team is charged what it was served, not what was guessed
        if usage is not None:
            served = max(usage.prompt_tokens - usage.cached_tokens, 0) + usage.completion_tokens
        self.queue.finished(ticket, served)
        self._wake.set()

    async def _run_pump(self) -> None:
        try:
            while self.queue:
                self._wake.clear()  # a release during the asks below wakes the sleep after them
                if not await self._dispatch_next():
                    await self._sleep()
        finally:
            self._pump = None

    async def _dispatch_next(self) -> bool:
        """Grant the queue's next waiter a permit if it may go now; if it may not (a long prompt
        whose KV does not fit yet), a shorter one of the queue's candidates that fits, unless one
        before it has aged. False when none went."""
        head = self.queue.peek()
        assert head is not None
        waiting = len(self.queue)
        permit = await self._try(head.ticket, waiting)
        if permit is not None:
            return self._hand_over(head, permit)
        if head.aged:
            return False
        smallest = head.ticket.tokens
        for waiter in self.queue.candidates()[1:]:
            if waiter.aged:
                return False  # it goes before anything else that is younger: wait for room
            if waiter.ticket.tokens >= smallest or not self._fits_here(waiter.ticket):
                continue  # no smaller than one that did not fit, or held by the count alone
            permit = await self._try(waiter.ticket, waiting)
            if permit is not None:
                return self._hand_over(waiter, permit)
            smallest = waiter.ticket.tokens
        return False

    def _fits_here(self, ticket: Ticket) -> bool:
        """Whether `ticket` fits what this process sees (the server's load, its own counts): the
        shared bank is asked only for a request that does."""
        if ticket.priority is Priority.BATCH and self._guarded():
            return False
        keep_reserve = ticket.priority is Priority.BATCH and self._reserve_kept()
        load = self.server_load
        if load is not None and not load.may_dispatch(ticket, self._batch_kv_share if keep_reserve else 1.0):
            return False
        caps = self._batch_caps if keep_reserve else self.caps
        return fits(caps, self.held.count, self.held.tokens, self.held.cost(ticket))

    def _hand_over(self, waiter: Waiter, permit: Permit) -> bool:
        if not self.queue.take(waiter) or waiter.reply.done():  # it gave up meanwhile
            freed = self.held.drop(waiter.ticket)
            if permit.bank is not None:
                permit.bank.release(self.url, freed)
            if self.server_load is not None:
                self.server_load.withdrawn()
            return True  # the queue changed: look again at once
        waited = time.monotonic() - waiter.enqueued_at
        waiter.reply.set_result(self._granted(waiter.ticket, permit, waited))
        return True

    async def _sleep(self) -> None:
        poll = LOCAL_POLL_S if self._bank is None else self._bank.poll_s
        try:
            async with asyncio.timeout(poll):
                await self._wake.wait()
        except TimeoutError:
            pass
