"""The waiting requests of one replica, in the order they are dispatched. Pure: no I/O, no clock.

Two classes: interactive work goes first; while both wait, batch work keeps `batch_share` of the
dispatches, so it is never starved, and when interactive work stops it gets everything.

Within a class, teams share in tokens with a virtual token counter (VTC, Sheng et al., "Fairness in
Serving Large Language Models", OSDI 2024): each team has a counter of the tokens it was served,
divided by its weight; the backlogged team with the lowest counter goes next. A dispatch charges
the prompt estimate at once, and the request's real count (uncached prompt plus completion) is
charged once it is known (`charge`). Chosen over deficit round robin because a request's cost is
not known when it is dispatched (its output length is not): DRR needs the cost up front to spend
a quantum, while VTC settles the real cost afterwards and the order follows. A team that becomes
backlogged is lifted to the lowest counter among the backlogged teams (or where the class last
served), so time spent idle (nothing queued, nothing running) banks no credit.

Within a team, waiting work goes by prompt-length bucket (`BUCKET_BOUNDS`), shortest first and in
arrival order within a bucket, so a few long prompts do not hold up many short ones. The head of a
longer bucket ages once `aging_passes` waiters have gone before it while it was the head: shorter
ones of its team dispatched, or ones the gate let past it (`take` of a waiter behind it, say
because its KV did not fit yet). An aged head goes next (the oldest first, if several have aged),
and the one behind it starts its count. Only a head ages, so longer requests go one per
`aging_passes` shorter ones: had every waiter aged from its arrival, a flood of long and short
prompts sent together would age all its long ones at once, and had an aged one waited for the
shorter ones older than it, they would be served in arrival order, as if there were no buckets. A
long request's wait stays bounded: its place in its bucket times `aging_passes` dispatches. Counted in dispatches rather than seconds
so that a deep backlog, where every waiter is old, keeps its order.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from gateway.routing.directives import Priority
from gateway.scheduling.ticket import Ticket
from gateway.settings.work import SchedulingSettings

# Estimated prompt tokens where a bucket ends: 0-2k, 2-8k, 8-32k, 32k and more
BUCKET_BOUNDS = (2048, 8192, 32768)
BUCKETS = len(BUCKET_BOUNDS) + 1
AGING_PASSES = SchedulingSettings().length_aging_passes  # the setting's default, declared there
CANDIDATES = 8  # how many waiters `candidates` offers at most


def bucket_of(prompt_tokens: int) -> int:
    """The prompt-length bucket of a request: 0 for the shortest."""
    return bisect_right(BUCKET_BOUNDS, prompt_tokens)


@dataclass(eq=False, slots=True)
class Waiter:
    """One queued request; compared by identity. The queue sets the fields after `reply`."""

    ticket: Ticket
    enqueued_at: float
    reply: Any = None  # the gate's future for this waiter
    bucket: int = field(default=0, init=False)
    arrival: int = field(default=0, init=False)  # its place in the queue's order of arrival
    passed: int = field(default=0, init=False)  # waiters behind it the gate dispatched first
    team_queue: _TeamQueue | None = field(default=None, init=False, repr=False)  # None once out of the queue

    @property
    def team_id(self) -> str:
        return self.ticket.team_id

    @property
    def priority(self) -> Priority:
        return self.ticket.priority

    @property
    def passes(self) -> int:
        """How many waiters went before it: shorter ones of its team while it was its bucket's
        head, and those the gate let past it."""
        team = self.team_queue
        if team is None or team.buckets[self.bucket][0] is not self:
            return self.passed
        return self.passed + team.shorter_dispatched[self.bucket] - team.head_since[self.bucket]

    @property
    def aged(self) -> bool:
        """It has been passed `aging_passes` times: nothing younger goes before it any more, and a
        gate should wait for room for it rather than let another request past."""
        team = self.team_queue
        return team is not None and self.passes >= team.aging_passes


@dataclass(slots=True)
class _TeamQueue:
    """One team's waiters in one class: a FIFO per prompt-length bucket."""

    aging_passes: int
    buckets: tuple[deque[Waiter], ...] = field(default_factory=lambda: tuple(deque() for _ in range(BUCKETS)))
    # Per bucket, the team's dispatches from shorter buckets so far, and that count when the
    # bucket's head became its head: the head's in-team passes are the growth since (no per-waiter
    # update on each dispatch)
    shorter_dispatched: list[int] = field(default_factory=lambda: [0] * BUCKETS)
    head_since: list[int] = field(default_factory=lambda: [0] * BUCKETS)
    size: int = 0

    def push(self, waiter: Waiter) -> None:
        waiter.team_queue = self
        queue = self.buckets[waiter.bucket]
        if not queue:  # the bucket's head from now
            self.head_since[waiter.bucket] = self.shorter_dispatched[waiter.bucket]
        queue.append(waiter)
        self.size += 1

    def next(self) -> Waiter | None:
        """The team's next: the oldest head that aged, else its shortest bucket's head."""
        heads = self.heads()
        return heads[0] if heads else None

    def heads(self) -> list[Waiter]:
        """Each bucket's head, in the team's order: those that aged (oldest first), then the
        others by bucket, shortest first."""
        heads = [queue[0] for queue in self.buckets if queue]
        aged = sorted((head for head in heads if head.aged), key=lambda head: head.arrival)
        return aged + [head for head in heads if not head.aged]

    def remove(self, waiter: Waiter, dispatched: bool) -> None:
        waiter.passed = waiter.passes  # kept, so it reads the same once out of the queue
        queue = self.buckets[waiter.bucket]
        was_head = queue[0] is waiter
        queue.remove(waiter)
        if was_head:  # the next one is the head from now
            self.head_since[waiter.bucket] = self.shorter_dispatched[waiter.bucket]
        self.size -= 1
        waiter.team_queue = None
        if dispatched:  # it passed the team's longer waiters that were there before it
            for bucket in range(waiter.bucket + 1, BUCKETS):
                self.shorter_dispatched[bucket] += 1


@dataclass(slots=True)
class _ClassQueue:
    """One priority class: a queue per team and each team's virtual token counter."""

    aging_passes: int
    teams: dict[str, _TeamQueue] = field(default_factory=dict)  # backlogged teams only
    counters: dict[str, float] = field(default_factory=dict)
    active: dict[str, int] = field(default_factory=dict)  # requests in flight, by team
    served_at: float = 0.0  # the counter of the team served last: where a team with no rivals starts
    size: int = 0

    def push(self, waiter: Waiter) -> None:
        team = waiter.team_id
        queue = self.teams.get(team)
        if queue is None:
            if not self.active.get(team):  # back from idle (nothing queued, nothing running): no credit
                floor = min((self.counters[t] for t in self.teams), default=self.served_at)
                self.counters[team] = max(self.counters.get(team, 0.0), floor)
            queue = self.teams[team] = _TeamQueue(self.aging_passes)
        queue.push(waiter)
        self.size += 1

    def _counter(self, team: str) -> float:
        return self.counters.get(team, self.served_at)

    def peek(self) -> Waiter | None:
        if not self.teams:
            return None
        return self.teams[min(self.teams, key=self._counter)].next()

    def candidates(self, limit: int) -> list[Waiter]:
        """Up to `limit` waiters: the teams by counter, each team's bucket heads in its order."""
        found: list[Waiter] = []
        for team in heapq.nsmallest(limit, self.teams, key=self._counter):
            found += self.teams[team].heads()
            if len(found) >= limit:
                break
        return found[:limit]

    def remove(self, waiter: Waiter, dispatched: bool = False) -> bool:
        queue = waiter.team_queue
        if queue is None or self.teams.get(waiter.team_id) is not queue:
            return False
        queue.remove(waiter, dispatched)
        if not queue.size:
            del self.teams[waiter.team_id]
        self.size -= 1
        return True

    def charge(self, team_id: str, tokens: float, weight: float) -> float:
        counter = self.counters[team_id] = self.counters.get(team_id, self.served_at) + tokens / weight
        return counter

    def forget_idle(self) -> None:
        """Drop the counters of idle teams (they restart from the floor when they come back)."""
        if len(self.counters) > 4 * (len(self.teams) + len(self.active)) + 64:
            self.counters = {t: c for t, c in self.counters.items() if t in self.teams or t in self.active}


class FairQueue:
    """`aging_passes`: how many waiters may go before one before it has aged (0: arrival order
    within a team)."""

    def __init__(self, batch_share: float, aging_passes: int = AGING_PASSES) -> None:
        self._classes = {priority: _ClassQueue(aging_passes) for priority in Priority}
        # Batch dispatches owed while both classes wait: +share/(1-share) per interactive dispatch
        self._batch_step = batch_share / (1.0 - batch_share) if batch_share < 1 else float("inf")
        self._batch_credit = 0.0
        self._arrivals = 0

    def __len__(self) -> int:
        return sum(c.size for c in self._classes.values())

    def waiting(self, priority: Priority) -> int:
        return self._classes[priority].size

    def push(self, waiter: Waiter) -> None:
        self._arrivals += 1
        waiter.arrival = self._arrivals
        waiter.bucket = bucket_of(waiter.ticket.prompt_tokens)
        self._classes[waiter.priority].push(waiter)

    def _class_order(self) -> tuple[_ClassQueue, _ClassQueue]:
        interactive, batch = self._classes[Priority.INTERACTIVE], self._classes[Priority.BATCH]
        if interactive.size and batch.size and self._batch_credit >= 1.0:
            return batch, interactive
        return interactive, batch

    def peek(self) -> Waiter | None:
        """The waiter to dispatch next, left in place."""
        first, second = self._class_order()
        return first.peek() or second.peek()

    def candidates(self, limit: int = CANDIDATES) -> list[Waiter]:
        """Up to `limit` waiters a gate may dispatch now, best first: `peek`'s first, then the
        heads of the other buckets and teams (by counter), then those of the other class.

        For a gate that cannot fit the first yet: it may dispatch a later one that fits (`take`
        counts it as passing those before it), unless one before it has `aged`, which it should
        wait for. A snapshot: after a `take`, ask again."""
        first, second = self._class_order()
        found = first.candidates(limit)
        if len(found) < limit:
            found += second.candidates(limit - len(found))
        return found

    def take(self, waiter: Waiter) -> bool:
        """Dispatch `waiter` (normally the one `peek` gave, or one of `candidates`): out of the
        queue, charged to its team. False if it is no longer queued (it gave up meanwhile)."""
        queue = self._classes[waiter.priority]
        if waiter.team_queue is None:
            return False
        if waiter is not self.peek():  # the gate let it past the waiters before it
            for ahead in self.candidates():
                if ahead is waiter:
                    break
                ahead.passed += 1
        both_wait = all(c.size for c in self._classes.values())
        if not queue.remove(waiter, dispatched=True):
            return False
        if both_wait:
            if waiter.priority is Priority.BATCH:
                self._batch_credit = max(0.0, self._batch_credit - 1.0)
            else:
                self._batch_credit += self._batch_step  # spent by batch dispatches while both wait
        else:
            self._batch_credit = 0.0  # one class alone owes the other nothing
        return True

    def remove(self, waiter: Waiter) -> bool:
        """A waiter that gave up (timed out, or its client left)."""
        return self._classes[waiter.priority].remove(waiter)

    def started(self, ticket: Ticket) -> None:
        """A request of the ticket's team was dispatched (from the queue or straight through): its
        prompt estimate is charged now."""
        queue = self._classes[ticket.priority]
        queue.active[ticket.team_id] = queue.active.get(ticket.team_id, 0) + 1
        queue.served_at = queue.charge(ticket.team_id, ticket.prompt_tokens, ticket.weight)
        queue.forget_idle()

    def finished(self, ticket: Ticket, served_tokens: float | None) -> None:
        """The request ended; `served_tokens`: what it really used (uncached prompt plus
        completion), charged in place of the estimate, if known."""
        queue = self._classes[ticket.priority]
        left = queue.active.get(ticket.team_id, 0) - 1
        if left > 0:
            queue.active[ticket.team_id] = left
        else:
            queue.active.pop(ticket.team_id, None)
        if served_tokens is not None:
            queue.charge(ticket.team_id, served_tokens - ticket.prompt_tokens, ticket.weight)
