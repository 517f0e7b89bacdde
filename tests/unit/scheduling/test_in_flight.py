"""What a replica holds in flight: a shared prefix counted once while any request with it is in
flight, and what is given back always what was charged."""

from __future__ import annotations

from gateway.routing.directives import Priority
from gateway.scheduling.in_flight import InFlight
from gateway.scheduling.ticket import Ticket


def ticket(prompt: int, output: int = 64, prefix: str | None = None, prefix_tokens: int = 0) -> Ticket:
    return Ticket("t", 1.0, Priority.BATCH, prompt, prompt + output, prefix, prefix_tokens)


def test_a_prefix_in_flight_is_counted_once() -> None:
    held = InFlight()
    first = ticket(2100, prefix="system", prefix_tokens=2048)
    second = ticket(2110, prefix="system", prefix_tokens=2048)
    assert held.hold(first) == 2164  # the first carries the prefix
    assert held.cost(second) == 2110 + 64 - 2048
    assert held.hold(second) == 126
    assert held.tokens == 2164 + 126
    assert (held.prompt, held.prefix_each, held.prefix_once, held.output) == (4210, 4096, 2048, 128)


def test_the_last_request_with_a_prefix_gives_it_back() -> None:
    held = InFlight()
    first = ticket(2100, prefix="system", prefix_tokens=2048)
    second = ticket(2110, prefix="system", prefix_tokens=2048)
    charged = held.hold(first) + held.hold(second)
    freed = held.drop(first)  # the first leaves: the prefix stays, held by the second
    assert freed == 2164 - 2048
    assert held.cost(ticket(2090, prefix="system", prefix_tokens=2048)) == 2090 + 64 - 2048
    freed += held.drop(second)
    assert freed == charged
    assert (held.count, held.tokens, held.prompt, held.prefix_each, held.prefix_once) == (0, 0, 0, 0, 0)
    assert held.cost(second) == 2174  # nobody holds it any more


def test_different_prefixes_and_none_count_whole() -> None:
    held = InFlight()
    assert held.hold(ticket(100)) == 164
    assert held.hold(ticket(3000, prefix="a", prefix_tokens=2048)) == 3064
    assert held.hold(ticket(3000, prefix="b", prefix_tokens=2048)) == 3064
    assert held.prefix_once == held.prefix_each == 4096


def test_estimates_of_one_prefix_that_differ_still_give_back_what_was_charged() -> None:
    held = InFlight()
    tickets = [
        ticket(2100, prefix="p", prefix_tokens=2048),
        ticket(2100, prefix="p", prefix_tokens=2050),
        ticket(2100, prefix="p", prefix_tokens=2040),
    ]
    charged = sum(held.hold(t) for t in tickets)
    assert held.tokens == charged
    freed = sum(held.drop(t) for t in (tickets[1], tickets[0], tickets[2]))
    assert freed == charged and held.tokens == 0 and held.prefix_once == 0


def test_a_prefix_longer_than_its_prompt_counts_as_the_prompt() -> None:
    held = InFlight()
    held.hold(ticket(100, prefix="p", prefix_tokens=500))
    assert held.prefix_once == held.prefix_each == 100
