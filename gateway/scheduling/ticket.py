"""What a request asks of the scheduler: whose it is, its class, and the tokens it will hold."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.routing.directives import Priority
from gateway.routing.prefix import PromptPrefix


@dataclass(frozen=True, slots=True)
class Ticket:
    team_id: str
    weight: float  # the team's scheduling weight (admin API, default 1)
    priority: Priority
    prompt_tokens: int  # estimated from the body: charged to the team when it is dispatched
    tokens: int  # prompt plus the output it may produce: what it holds of max_tokens_in_flight
    # The prompt's shared leading part, when it has one: a key naming it (the same text gives the
    # same key in every process) and its estimated tokens. A server with a prefix cache holds such
    # a prefix once for every request in flight that starts with it.
    prefix: str | None = None
    prefix_tokens: int = 0
    # The digests of the prompt's leading blocks, for replica choice (gateway.scheduling.replicas),
    # and the replica its conversation was served by last (gateway.routing.conversations)
    leading: PromptPrefix | None = None
    replica: str | None = None


UNSCHEDULED = Ticket(team_id="", weight=1.0, priority=Priority.INTERACTIVE, prompt_tokens=0, tokens=0)
