"""What this process has in flight at one replica, counted as the server counts it. Pure: no I/O.

A server with a prefix cache holds a prompt's shared leading part once for every running request
that starts with it, so `tokens` (what `max_tokens_in_flight` caps) counts a ticket's `prefix_tokens`
once while any request with the same `prefix` is in flight here: the first request with a prefix is
charged it, the others only their own part, and the last one to end gives it back. The sums kept
beside it (whole prompts, prefixes per request and once, outputs) let the capacity model predict the
server's KV use either way, sharing or not, in O(1) per request.
"""

from __future__ import annotations

from gateway.scheduling.ticket import Ticket


def _prefix_tokens(ticket: Ticket) -> int:
    return min(ticket.prefix_tokens, ticket.prompt_tokens) if ticket.prefix is not None else 0


class InFlight:
    """Counted from `hold` (before a permit is asked for, so that arrivals during the ask see it)
    to `drop` (the request ended, or its permit was refused)."""

    __slots__ = ("_prefixes", "count", "output", "prefix_each", "prefix_once", "prompt", "tokens")

    def __init__(self) -> None:
        self.count = 0
        self.tokens = 0  # uncached prompt + max output, each prefix once: what the caps count
        self.prompt = 0  # whole prompt estimates, prefixes included
        self.output = 0  # the most output the requests allow
        self.prefix_each = 0  # prefix tokens counted for every request that has one
        self.prefix_once = 0  # prefix tokens counted once per distinct prefix in flight
        # prefix -> (requests in flight with it, its tokens as the first of them counted them): the
        # estimates of one prefix may differ by a token or two, and what is given back must be what
        # was charged
        self._prefixes: dict[str, tuple[int, int]] = {}

    def holds_prefix(self, ticket: Ticket) -> bool:
        return ticket.prefix is not None and ticket.prefix in self._prefixes

    def cost(self, ticket: Ticket) -> int:
        """The tokens `ticket` would add to `tokens` now."""
        if ticket.prefix is None:
            return ticket.tokens
        held = self._prefixes.get(ticket.prefix)
        return ticket.tokens if held is None else ticket.tokens - min(_prefix_tokens(ticket), held[1])

    def hold(self, ticket: Ticket) -> int:
        """Count `ticket` in flight; the tokens it added (its charge against the caps)."""
        charge = self.cost(ticket)
        prefix = _prefix_tokens(ticket)
        if ticket.prefix is not None:
            held = self._prefixes.get(ticket.prefix)
            if held is None:
                self._prefixes[ticket.prefix] = (1, prefix)
                self.prefix_once += prefix
            else:
                self._prefixes[ticket.prefix] = (held[0] + 1, held[1])
        self.count += 1
        self.tokens += charge
        self.prompt += ticket.prompt_tokens
        self.output += ticket.tokens - ticket.prompt_tokens
        self.prefix_each += prefix
        return charge

    def drop(self, ticket: Ticket) -> int:
        """Count `ticket` out; the tokens it gave back (the prefix too if it was the last with it)."""
        prefix = _prefix_tokens(ticket)
        freed = ticket.tokens
        if ticket.prefix is not None:
            held = self._prefixes.get(ticket.prefix, (1, prefix))
            freed -= min(prefix, held[1])
            if held[0] > 1:
                self._prefixes[ticket.prefix] = (held[0] - 1, held[1])
            else:
                self._prefixes.pop(ticket.prefix, None)
                self.prefix_once -= held[1]
                freed += held[1]
        self.count -= 1
        self.tokens -= freed
        self.prompt -= ticket.prompt_tokens
        self.output -= ticket.tokens - ticket.prompt_tokens
        self.prefix_each -= prefix
        return freed
