"""The scheduler: for each attempt at a deployment, a replica of its provider and a permit to send.

A provider without `capacity` has no queue: its requests only choose a replica (a conversation's,
the cache key's, the prompt prefix's, or the least loaded: `gateway.scheduling.replicas`) and go. With `capacity`, each replica has a gate (`gateway.scheduling.gate`)
that admits up to its caps and queues the rest, fairly. The scheduler works within one deployment:
a batch waits at its pinned deployment, never anywhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from gateway.routing.directives import Priority
from gateway.scheduling.gate import Grant, ReplicaGate
from gateway.scheduling.permits import Caps, PermitBank
from gateway.scheduling.replicas import FAILED_REPLICA_S, PrefixIndex, choose_replica
from gateway.scheduling.server_load import ServerLoad, metrics_url_for
from gateway.scheduling.ticket import Ticket
from gateway.settings import Catalog, Provider, SchedulingSettings

MOCK_BASE_URL = "http://mock.invalid/v1"


@dataclass(eq=False, slots=True)
class _Unlimited:
    """A replica with no caps: counted, never queued."""

    url: str
    in_flight: int = 0

    @property
    def load(self) -> int:
        return self.in_flight


class _Counted(Grant):
    """The grant of an unlimited replica: it only counts the request in flight there."""

    __slots__ = ("replica",)

    def __init__(self, replica: _Unlimited) -> None:
        super().__init__(replica.url)
        self.replica = replica
        replica.in_flight += 1

    def release(self, usage: object = None) -> None:
        if not self.released:
            self.released = True
            self.replica.in_flight -= 1


class ProviderQueue:
    """One provider's replicas and what waits for them."""

    def __init__(
        self,
        provider: Provider,
        settings: SchedulingSettings,
        bank: PermitBank | None,
        observe_wait: Callable[[str, str, float], None],
    ) -> None:
        self.provider = provider
        self._settings = settings
        urls = provider.urls or (MOCK_BASE_URL,)
        self.urls = urls
        capacity = provider.capacity
        self.limited = capacity is not None and capacity.limited
        self.gates: list[ReplicaGate] = []
        self.unlimited = [_Unlimited(url) for url in urls]
        self._rotation = itertools.count()
        self.prefixes = PrefixIndex(len(urls))  # the leading blocks each replica was sent lately
        self._failing: dict[int, float] = {}  # replica -> until when its failure passes it over
        if capacity is not None and self.limited:
            caps = Caps(capacity.max_concurrency, capacity.max_tokens_in_flight)
            # Only static caps are split across processes: a replica sized from its own metrics
            # alone (load_metrics) has nothing to count in Redis, where a round trip per dispatch
            # would stand between every freed slot and the request that takes it
            shared = bank if caps.bounded else None
            for url in urls:
                gate = ReplicaGate(
                    provider.name,
                    url,
                    caps,
                    shared,
                    batch_share=settings.batch_share,
                    interactive_reserve=settings.interactive_reserve,
                    reserve_idle_s=settings.reserve_idle_s,
                    prefill_guard_s=settings.interactive_prefill_guard_s,
                    aging_passes=settings.length_aging_passes,
                    observe_wait=lambda priority, s: observe_wait(provider.name, priority, s),
                )
                self.gates.append(gate)

    def queued(self, priority: Priority | None = None) -> int:
        if priority is None:
            return sum(len(g.queue) for g in self.gates)
        return sum(g.queue.waiting(priority) for g in self.gates)

    def _pick(self, cache_key: str | None, ticket: Ticket, loads: list[int]) -> int:
        now = time.monotonic()
        failing = [i for i, until in self._failing.items() if until > now]
        matched = (
            self.prefixes.matched(ticket.leading) if ticket.leading is not None and not cache_key else []
        )
        index = choose_replica(
            cache_key,
            self.urls,
            loads,
            self._settings.affinity_load_bound,
            next(self._rotation),
            prefix=ticket.leading,
            matched=matched,
            preferred=self.urls.index(ticket.replica) if ticket.replica in self.urls else None,
            failing=failing,
        )
        if ticket.leading is not None and ticket.leading.blocks:
            self.prefixes.record(ticket.leading, index)
        return index

    def failed(self, url: str, for_s: float) -> None:
        """A request sent to replica `url` failed (a retryable error): while another replica is
        within the load bound, neither affinity nor a conversation sends work there for `for_s`."""
        if url in self.urls:
            self._failing[self.urls.index(url)] = time.monotonic() + for_s

    def succeeded(self, url: str) -> None:
        if self._failing and url in self.urls:
            self._failing.pop(self.urls.index(url), None)

    async def enter(self, cache_key: str | None, ticket: Ticket) -> Grant:
        if not self.limited:
            if len(self.unlimited) == 1:
                return _Counted(self.unlimited[0])
            index = self._pick(cache_key, ticket, [r.load for r in self.unlimited])
            return _Counted(self.unlimited[index])
        index = 0 if len(self.gates) == 1 else self._pick(cache_key, ticket, [g.load for g in self.gates])
        gate = self.gates[index]
        timeouts = self._settings.queue_timeout_s
        timeout = timeouts.batch if ticket.priority is Priority.BATCH else timeouts.interactive
        return await gate.enter(ticket, timeout, self._full)

    def _full(self) -> bool:
        return self.queued() >= self._settings.max_queued


class Scheduler:
    def __init__(
        self,
        catalog: Catalog,
        bank: PermitBank | None = None,
        *,
        observe_wait: Callable[[str, str, float], None] = lambda provider, priority, s: None,
    ) -> None:
        self._settings = catalog.scheduling
        self.bank = bank  # None: caps hold per process
        self.providers = {
            p.name: ProviderQueue(p, catalog.scheduling, self.bank, observe_wait) for p in catalog.providers
        }
        self._tasks: list[asyncio.Task[None]] = []
        self._metrics_client: httpx.AsyncClient | None = None

    async def enter(self, provider: Provider, cache_key: str | None, ticket: Ticket) -> Grant:
        """A grant to send one request to a replica of `provider`: at once, or after waiting."""
        return await self.providers[provider.name].enter(cache_key, ticket)

    def replica_failed(self, provider: Provider, url: str) -> None:
        """An attempt at replica `url` failed with a retryable error: the provider's affinity passes
        it over for a few seconds (`FAILED_REPLICA_S`), or until a request there succeeds."""
        self.providers[provider.name].failed(url, FAILED_REPLICA_S)

    def replica_succeeded(self, provider: Provider, url: str) -> None:
        self.providers[provider.name].succeeded(url)

    def gates(self) -> Iterator[ReplicaGate]:
        for queue in self.providers.values():
            yield from queue.gates

    def start(self) -> None:
        """Background work in the serving loop: the bank's leases, the servers' load readings."""
        if self.bank is not None:
            self.bank.start()
        for queue in self.providers.values():
            capacity = queue.provider.capacity
            if capacity is None or not capacity.load_metrics:
                continue
            if self._metrics_client is None:
                self._metrics_client = httpx.AsyncClient(timeout=1.0)
            for gate in queue.gates:
                gate.server_load = ServerLoad(
                    metrics_url_for(gate.url, capacity.metrics_url),
                    self._settings,
                    self._metrics_client,
                    on_change=gate.wake,
                    in_flight=gate.held,
                )
                self._tasks.append(asyncio.create_task(gate.server_load.run(), name="server-load"))

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._metrics_client is not None:
            await self._metrics_client.aclose()
        if self.bank is not None:
            with contextlib.suppress(Exception):  # Redis gone: the leases run out by themselves
                await self.bank.aclose()

    async def snapshot(self, provider: str) -> list[dict[str, Any]]:
        """Each replica of `provider` as `/admin/providers` shows it."""
        queue = self.providers[provider]
        if not queue.limited:
            return [{"url": r.url, "in_flight": r.in_flight} for r in queue.unlimited]
        rows = []
        for gate in queue.gates:
            row: dict[str, Any] = {
                "url": gate.url,
                "in_flight": gate.in_flight,
                "tokens_in_flight": gate.tokens_in_flight,
                "queued": {p.value: gate.queue.waiting(p) for p in Priority},
                "max_concurrency": gate.caps.max_concurrency,
                "max_tokens_in_flight": gate.caps.max_tokens_in_flight,
            }
            if self.bank is not None:
                with contextlib.suppress(Exception):  # what every process holds, if the bank answers
                    totals = await self.bank.totals(gate.url)
                    row["all_processes"] = {"in_flight": totals.in_flight, "tokens_in_flight": totals.tokens}
            if gate.server_load is not None:
                row["server_load"] = gate.server_load.snapshot()
            rows.append(row)
        return rows
