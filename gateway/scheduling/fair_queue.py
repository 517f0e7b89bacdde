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
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from gateway.routing.directives import Priority
from gateway.scheduling.ticket import Ticket


@dataclass(eq=False, slots=True)
class Waiter:
    """One queued request; compared by identity."""

    ticket: Ticket
    enqueued_at: float
    reply: Any = None  # the gate's future for this waiter

    @property
    def team_id(self) -> str:
        return self.ticket.team_id

    @property
    def priority(self) -> Priority:
        return self.ticket.priority


@dataclass(slots=True)
class _ClassQueue:
    """One priority class: a queue per team and each team's virtual token counter."""

    teams: dict[str, deque[Waiter]] = field(default_factory=dict)  # backlogged teams only
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
            queue = self.teams[team] = deque()
        queue.append(waiter)
        self.size += 1

    def peek(self) -> Waiter | None:
        if not self.teams:
            return None
        team = min(self.teams, key=lambda t: self.counters.get(t, self.served_at))
        return self.teams[team][0]

    def remove(self, waiter: Waiter) -> bool:
        queue = self.teams.get(waiter.team_id)
        if queue is None or waiter not in queue:
            return False
        queue.remove(waiter)
        if not queue:
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
    def __init__(self, batch_share: float) -> None:
        self._classes = {priority: _ClassQueue() for priority in Priority}
        # Batch dispatches owed while both classes wait: +share/(1-share) per interactive dispatch
        self._batch_step = batch_share / (1.0 - batch_share) if batch_share < 1 else float("inf")
        self._batch_credit = 0.0

    def __len__(self) -> int:
        return sum(c.size for c in self._classes.values())

    def waiting(self, priority: Priority) -> int:
        return self._classes[priority].size

    def push(self, waiter: Waiter) -> None:
        self._classes[waiter.priority].push(waiter)

    def peek(self) -> Waiter | None:
        """The waiter to dispatch next, left in place."""
        interactive = self._classes[Priority.INTERACTIVE].peek()
        batch = self._classes[Priority.BATCH].peek()
        if interactive is None or batch is None:
            return interactive or batch
        return batch if self._batch_credit >= 1.0 else interactive

    def take(self, waiter: Waiter) -> bool:
        """Dispatch `waiter` (normally the one `peek` gave): out of the queue, charged to its team.
        False if it is no longer queued (it gave up meanwhile)."""
        both_wait = all(c.size for c in self._classes.values())
        queue = self._classes[waiter.priority]
        if not queue.remove(waiter):
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
