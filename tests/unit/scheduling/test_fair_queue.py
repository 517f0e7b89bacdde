"""The dispatch order: classes, teams' shares in tokens, no banked credit."""

from __future__ import annotations

from collections import Counter

from gateway.routing.directives import Priority
from gateway.scheduling.fair_queue import FairQueue, Waiter, bucket_of
from gateway.scheduling.ticket import Ticket


def waiter(team: str, prompt: int, priority: Priority = Priority.INTERACTIVE, weight: float = 1.0) -> Waiter:
    return Waiter(Ticket(team, weight, priority, prompt, prompt), enqueued_at=0.0)


def serve(queue: FairQueue, dispatches: int, refill: dict[str, Waiter] | None = None) -> Counter[str]:
    """Dispatch `dispatches` times, pushing a copy of each served waiter back (a flooding team)."""
    tokens: Counter[str] = Counter()
    for _ in range(dispatches):
        chosen = queue.peek()
        assert chosen is not None
        assert queue.take(chosen)
        queue.started(chosen.ticket)
        tokens[chosen.team_id] += chosen.ticket.prompt_tokens
        queue.push(waiter(chosen.team_id, chosen.ticket.prompt_tokens, chosen.priority, chosen.ticket.weight))
        queue.finished(chosen.ticket, None)
    return tokens


def test_teams_share_in_tokens_not_in_requests() -> None:
    queue = FairQueue(batch_share=0.1)
    for _ in range(4):
        queue.push(waiter("heavy", 8192))
        queue.push(waiter("light", 256))
    tokens = serve(queue, 2000)
    assert abs(tokens["heavy"] - tokens["light"]) <= 8192  # within one heavy request
    assert tokens["light"] > 0 and tokens["heavy"] > 0


def test_weights_split_tokens_in_proportion() -> None:
    queue = FairQueue(batch_share=0.1)
    for _ in range(4):
        queue.push(waiter("gold", 500, weight=2.0))
        queue.push(waiter("tin", 500, weight=1.0))
    tokens = serve(queue, 3000)
    assert abs(tokens["gold"] / tokens["tin"] - 2.0) < 0.01


def test_an_idle_team_banks_no_credit() -> None:
    queue = FairQueue(batch_share=0.1)
    queue.push(waiter("busy", 100))
    serve(queue, 1000)  # busy's counter climbs alone
    queue.push(waiter("late", 100))
    tokens = serve(queue, 100)
    # Had "late" started from zero it would take all 100 dispatches; lifted, it takes about half.
    assert 40 <= tokens["late"] // 100 <= 60


def test_interactive_goes_first_and_batch_keeps_its_share() -> None:
    queue = FairQueue(batch_share=0.1)
    for _ in range(3):
        queue.push(waiter("a", 10, Priority.INTERACTIVE))
        queue.push(waiter("b", 10, Priority.BATCH))
    first = queue.peek()
    assert first is not None and first.priority is Priority.INTERACTIVE
    served: Counter[Priority] = Counter()
    for _ in range(1000):
        chosen = queue.peek()
        assert chosen is not None and queue.take(chosen)
        served[chosen.priority] += 1
        queue.push(waiter(chosen.team_id, 10, chosen.priority))
    assert 90 <= served[Priority.BATCH] <= 110


def test_batch_alone_gets_everything() -> None:
    queue = FairQueue(batch_share=0.1)
    queue.push(waiter("b", 10, Priority.BATCH))
    assert queue.peek() is not None and queue.peek().priority is Priority.BATCH  # type: ignore[union-attr]


def test_a_waiter_that_gave_up_is_not_dispatched() -> None:
    queue = FairQueue(batch_share=0.1)
    gone, stays = waiter("a", 10), waiter("a", 10)
    queue.push(gone)
    queue.push(stays)
    assert queue.remove(gone)
    assert not queue.take(gone)
    assert queue.peek() is stays and len(queue) == 1


def test_real_usage_corrects_the_estimate() -> None:
    queue = FairQueue(batch_share=0.1)
    for _ in range(2):
        queue.push(waiter("a", 100))
        queue.push(waiter("b", 100))
    chosen = queue.peek()
    assert chosen is not None and queue.take(chosen)
    queue.started(chosen.ticket)
    # It produced 10,000 completion tokens: its team waits until the other has caught up.
    queue.finished(chosen.ticket, 100 + 10_000)
    other = "b" if chosen.team_id == "a" else "a"
    for _ in range(2):
        nxt = queue.peek()
        assert nxt is not None and nxt.team_id == other
        assert queue.take(nxt)
        queue.started(nxt.ticket)
        queue.push(waiter(other, 100))


def test_a_team_with_requests_running_keeps_its_place() -> None:
    """A team whose queue empties while its requests run is not idle: it is not lifted."""
    queue = FairQueue(batch_share=0.1)
    for _ in range(2):
        queue.push(waiter("heavy", 8000))  # heavy keeps two queued
    queue.push(waiter("light", 100))  # light keeps one queued, and its queue empties on each take
    served: Counter[str] = Counter()
    for _ in range(200):
        nxt = queue.peek()
        assert nxt is not None and queue.take(nxt)
        queue.started(nxt.ticket)  # and it runs on: nothing finishes here
        served[nxt.team_id] += nxt.ticket.prompt_tokens
        queue.push(waiter(nxt.team_id, nxt.ticket.prompt_tokens))
    assert 0.8 < served["light"] / served["heavy"] < 1.25  # tokens, not turns, are shared


def test_batch_share_above_a_half_is_kept_too() -> None:
    queue = FairQueue(batch_share=0.75)
    for _ in range(3):
        queue.push(waiter("a", 10, Priority.INTERACTIVE))
        queue.push(waiter("b", 10, Priority.BATCH))
    served: Counter[Priority] = Counter()
    for _ in range(1000):
        chosen = queue.peek()
        assert chosen is not None and queue.take(chosen)
        served[chosen.priority] += 1
        queue.push(waiter(chosen.team_id, 10, chosen.priority))
    assert 740 <= served[Priority.BATCH] <= 760


def drain(queue: FairQueue) -> list[int]:
    """Dispatch everything queued; the prompt sizes in the order they went."""
    order = []
    while (chosen := queue.peek()) is not None:
        assert queue.take(chosen)
        queue.started(chosen.ticket)
        order.append(chosen.ticket.prompt_tokens)
    return order


def test_buckets_go_shortest_first_and_in_arrival_order_within_one() -> None:
    queue = FairQueue(batch_share=0.1)
    for prompt in (40_000, 10_000, 3_000, 1_500, 100, 9_000):
        queue.push(waiter("a", prompt))
    assert drain(queue) == [1_500, 100, 3_000, 10_000, 9_000, 40_000]


def test_bucket_bounds() -> None:
    assert [bucket_of(n) for n in (0, 2047, 2048, 8191, 8192, 32767, 32768, 10**6)] == [
        0,
        0,
        1,
        1,
        2,
        2,
        3,
        3,
    ]


def test_a_short_request_passes_a_long_one_of_its_team() -> None:
    queue = FairQueue(batch_share=0.1)
    long, short = waiter("a", 40_000), waiter("a", 200)
    queue.push(long)
    queue.push(short)
    assert queue.peek() is short
    assert queue.take(short)
    assert long.passes == 1 and not long.aged


def test_a_long_request_goes_first_once_it_has_aged() -> None:
    queue = FairQueue(batch_share=0.1, aging_passes=3)
    long = waiter("a", 40_000)
    queue.push(long)
    for _ in range(10):
        queue.push(waiter("a", 200))
    assert drain(queue)[:4] == [200, 200, 200, 40_000]
    assert long.passes == 3


def test_an_aged_request_goes_next_and_the_one_behind_it_starts_its_count() -> None:
    queue = FairQueue(batch_share=0.1, aging_passes=1)
    for prompt in (100, 40_000, 101, 40_001, 102):
        queue.push(waiter("a", prompt))
    # 100 goes and ages the long head, which goes next; the other long one counts from then on
    assert drain(queue) == [100, 40_000, 101, 40_001, 102]


def test_no_aging_passes_is_arrival_order() -> None:
    queue = FairQueue(batch_share=0.1, aging_passes=0)
    for prompt in (40_000, 100, 9_000, 200):
        queue.push(waiter("a", prompt))
    assert drain(queue) == [40_000, 100, 9_000, 200]


def test_a_long_requests_wait_is_bounded_in_a_flood_of_short_ones() -> None:
    queue = FairQueue(batch_share=0.1, aging_passes=32)
    for _ in range(10):
        queue.push(waiter("a", 200))
    long = waiter("a", 40_000)
    queue.push(long)
    dispatched = 0
    while dispatched < 1000:
        chosen = queue.peek()
        assert chosen is not None and queue.take(chosen)
        dispatched += 1
        if chosen is long:
            break
        queue.push(waiter("a", 200))  # the short ones never stop coming
    assert dispatched == 33  # the 32 that passed it, then itself


def test_long_requests_sent_with_short_ones_go_one_per_aging_passes() -> None:
    """A flood of both at once (every 16th a long one): only a bucket's head ages, so the long
    ones do not all age together and fall back into arrival order."""
    queue = FairQueue(batch_share=0.1, aging_passes=8)
    for i in range(64):
        queue.push(waiter("a", 40_000 if i % 16 == 15 else 200))
    order = drain(queue)
    longs = [place for place, prompt in enumerate(order) if prompt == 40_000]
    assert longs == [8, 17, 26, 35]  # after 8 short ones each, while short ones wait


def test_teams_share_in_tokens_whatever_the_length_order() -> None:
    queue = FairQueue(batch_share=0.1)
    for prompt in (40_000, 500, 500, 9_000):
        queue.push(waiter("mixed", prompt))
    for _ in range(4):
        queue.push(waiter("light", 256))
    tokens = serve(queue, 3000)
    assert abs(tokens["mixed"] - tokens["light"]) <= 40_000  # within one long request
    assert tokens["mixed"] > 0 and tokens["light"] > 0


def test_class_order_comes_before_length() -> None:
    queue = FairQueue(batch_share=0.1)
    queue.push(waiter("b", 100, Priority.BATCH))
    long = waiter("a", 40_000, Priority.INTERACTIVE)
    queue.push(long)
    assert queue.peek() is long
    served: Counter[Priority] = Counter()
    for _ in range(1000):
        chosen = queue.peek()
        assert chosen is not None and queue.take(chosen)
        served[chosen.priority] += 1
        queue.push(waiter(chosen.team_id, chosen.ticket.prompt_tokens, chosen.priority))
    assert 90 <= served[Priority.BATCH] <= 110


def test_candidates_let_a_gate_pass_a_long_head_until_it_has_aged() -> None:
    queue = FairQueue(batch_share=0.1, aging_passes=2)
    long = waiter("longs", 40_000)
    queue.push(long)
    for _ in range(3):
        queue.push(waiter("shorts", 100))
    queue.push(waiter("shorts", 100, Priority.BATCH))
    # The long request is first (its team's counter is as low, and it came first); say its KV does
    # not fit yet: the gate takes the next candidate that does
    for _ in range(2):
        candidates = queue.candidates()
        assert candidates[0] is queue.peek() is long and not long.aged
        assert [(c.team_id, c.priority) for c in candidates[1:]] == [
            ("shorts", Priority.INTERACTIVE),
            ("shorts", Priority.BATCH),  # the other class comes last
        ]
        assert queue.take(candidates[1])
        queue.started(candidates[1].ticket)
    assert long.passes == 2 and long.aged  # now the gate waits for room for it
    assert queue.candidates()[0] is long


def test_candidates_follow_the_class_order_and_stop_at_the_limit() -> None:
    queue = FairQueue(batch_share=0.5)
    for team in ("a", "b", "c"):
        queue.push(waiter(team, 100, Priority.INTERACTIVE))
        queue.push(waiter(team, 100, Priority.BATCH))
    assert [c.priority for c in queue.candidates()] == [Priority.INTERACTIVE] * 3 + [Priority.BATCH] * 3
    interactive = queue.peek()
    assert interactive is not None and queue.take(interactive)  # batch is owed the next dispatch
    assert [c.priority for c in queue.candidates()] == [Priority.BATCH] * 3 + [Priority.INTERACTIVE] * 2
    assert len(queue.candidates(limit=2)) == 2
    assert queue.candidates()[0] is queue.peek()
