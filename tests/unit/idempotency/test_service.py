"""`IdempotentRequests`: the first request of a key runs once and its answer is replayed to its
repeats (which wait for it while it runs); a failure the client should retry frees the key, an
upstream's refusal is kept; an answer over the cap is not kept; a first request whose client left
runs on and is kept; a first one that runs past its lease keeps its key (renewed), one whose
process died is taken over when its lease ends; without a store, requests
run as unkeyed ones."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from gateway.errors import Conflict, GatewayError, UpstreamRejected, UpstreamUnavailable
from gateway.idempotency.keys import IdempotentRequest, idempotent_request
from gateway.idempotency.records import Claim, Record, StoredAnswer
from gateway.idempotency.service import REPLAY_HEADER, ErrorAnswer, IdempotentRequests
from gateway.idempotency.store import MemoryIdempotencyStore, StoreUnavailable
from gateway.proxy.exchange import ProxyResult

REQUEST = idempotent_request("team-a", "key-1", "POST", "/v1/chat/completions", b"{}")


class Upstream:
    """What the proxy pipeline would answer: counts its runs, each answer naming its run."""

    def __init__(self, delay_s: float = 0.0, fail: GatewayError | None = None, size: int = 2) -> None:
        self.runs = 0
        self.delay_s, self.fail, self.size = delay_s, fail, size

    async def __call__(self) -> ProxyResult:
        self.runs += 1
        run = self.runs
        await asyncio.sleep(self.delay_s)
        if self.fail is not None:
            self.fail.logged = True  # reached an upstream: metered
            raise self.fail
        return ProxyResult({"x-request-id": f"req_{run}"}, body=b"x" * self.size)


def rendered(exc: GatewayError) -> ErrorAnswer:
    return ErrorAnswer(exc.status, {"x-request-id": "req_1"}, exc.to_json())


def requests(
    lease_s: float = 5.0, max_answer_bytes: int = 1000, outcomes: list[str] | None = None
) -> IdempotentRequests:
    """`outcomes`: where each keyed request's outcome is counted (the metrics' counter in the app)."""
    counted = outcomes if outcomes is not None else []
    return IdempotentRequests(MemoryIdempotencyStore(), 60.0, lease_s, max_answer_bytes, count=counted.append)


def serve(
    idempotent: IdempotentRequests,
    run: Callable[[], Awaitable[ProxyResult]],
    request_id: str,
    request: IdempotentRequest = REQUEST,
) -> Awaitable[ProxyResult]:
    return idempotent.serve(request, request_id, run, rendered)


async def test_a_repeat_is_answered_from_the_store() -> None:
    outcomes: list[str] = []
    idempotent, upstream = requests(outcomes=outcomes), Upstream()

    first = await serve(idempotent, upstream, "req_1")
    again = await serve(idempotent, upstream, "req_2")

    assert upstream.runs == 1
    assert again.body == first.body and again.status == 200
    assert again.headers == {"x-request-id": "req_1", REPLAY_HEADER: "true"}
    assert outcomes == ["first", "replayed"]


async def test_concurrent_repeats_wait_for_the_first() -> None:
    idempotent, upstream = requests(), Upstream(delay_s=0.2)

    answers = await asyncio.gather(*(serve(idempotent, upstream, f"req_{n}") for n in range(5)))

    assert upstream.runs == 1
    assert {a.headers["x-request-id"] for a in answers} == {"req_1"}


async def test_another_request_under_the_key_is_a_conflict_even_while_the_first_runs() -> None:
    outcomes: list[str] = []
    idempotent, upstream = requests(outcomes=outcomes), Upstream(delay_s=0.2)
    other = idempotent_request("team-a", "key-1", "POST", "/v1/chat/completions", b"{ }")
    first = asyncio.create_task(serve(idempotent, upstream, "req_1"))
    await asyncio.sleep(0.05)

    with pytest.raises(Conflict) as conflict:
        await serve(idempotent, upstream, "req_2", other)
    await first

    assert conflict.value.status == 409 and conflict.value.code == "idempotency_key_reused"
    assert conflict.value.headers["x-should-retry"] == "false"
    with pytest.raises(Conflict):
        await serve(idempotent, upstream, "req_3", other)  # and once it is kept
    assert outcomes == ["first", "conflict", "conflict"]


async def test_a_failure_the_client_should_retry_frees_the_key_for_the_retry() -> None:
    idempotent, upstream = requests(), Upstream(fail=UpstreamUnavailable("down"))

    with pytest.raises(UpstreamUnavailable):
        await serve(idempotent, upstream, "req_1")
    upstream.fail = None
    retried = await serve(idempotent, upstream, "req_2")

    assert upstream.runs == 2
    assert REPLAY_HEADER not in retried.headers


async def test_a_waiting_repeat_runs_itself_when_the_first_fails_retryably() -> None:
    idempotent = requests()
    failing, working = Upstream(delay_s=0.1, fail=UpstreamUnavailable("down")), Upstream()
    first = asyncio.create_task(serve(idempotent, failing, "req_1"))
    await asyncio.sleep(0.02)
    repeat = asyncio.create_task(serve(idempotent, working, "req_2"))

    with pytest.raises(UpstreamUnavailable):
        await first
    answer = await repeat

    assert failing.runs == working.runs == 1
    assert REPLAY_HEADER not in answer.headers


async def test_an_upstreams_refusal_is_kept_and_replayed_as_it_was_answered() -> None:
    idempotent, upstream = requests(), Upstream(fail=UpstreamRejected("bad field", status=400))

    with pytest.raises(UpstreamRejected):
        await serve(idempotent, upstream, "req_1")
    replayed = await serve(idempotent, upstream, "req_2")

    assert upstream.runs == 1
    assert replayed.status == 400
    assert b"bad field" in replayed.body
    assert replayed.headers[REPLAY_HEADER] == "true"


async def test_a_refusal_before_any_upstream_is_not_kept() -> None:
    idempotent, upstream = requests(), Upstream(fail=UpstreamRejected("bad", status=400))
    upstream.fail = None

    async def refused() -> ProxyResult:
        upstream.runs += 1
        raise GatewayError("no such model", status=404)  # never logged: no upstream reached

    with pytest.raises(GatewayError):
        await serve(idempotent, refused, "req_1")
    await serve(idempotent, upstream, "req_2")

    assert upstream.runs == 2


async def test_an_answer_over_the_cap_is_not_kept() -> None:
    idempotent, upstream = requests(max_answer_bytes=100), Upstream(size=500)

    await serve(idempotent, upstream, "req_1")
    again = await serve(idempotent, upstream, "req_2")

    assert upstream.runs == 2
    assert REPLAY_HEADER not in again.headers


async def test_a_first_request_whose_client_left_runs_on_and_is_kept() -> None:
    idempotent, upstream = requests(), Upstream(delay_s=0.2)
    first = asyncio.create_task(serve(idempotent, upstream, "req_1"))
    await asyncio.sleep(0.05)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first

    retried = await serve(idempotent, upstream, "req_2")

    assert upstream.runs == 1
    assert retried.headers["x-request-id"] == "req_1"
    assert retried.headers[REPLAY_HEADER] == "true"


async def test_a_first_request_running_past_its_lease_keeps_its_key() -> None:
    idempotent, upstream = requests(lease_s=0.2), Upstream(delay_s=0.7)

    first = asyncio.create_task(serve(idempotent, upstream, "req_1"))
    await asyncio.sleep(0.02)
    repeat = await asyncio.wait_for(serve(idempotent, upstream, "req_2"), 3)
    await first

    assert upstream.runs == 1
    assert repeat.headers == {"x-request-id": "req_1", REPLAY_HEADER: "true"}


async def test_the_claim_of_a_process_that_died_is_taken_over_when_its_lease_ends() -> None:
    idempotent, upstream = requests(lease_s=0.2), Upstream()
    await idempotent.store.claim(REQUEST.slot, Claim(REQUEST.fingerprint, "req_0"), 0.2)  # nobody renews it

    taken_over = await asyncio.wait_for(serve(idempotent, upstream, "req_2"), 3)

    assert upstream.runs == 1
    assert taken_over.headers["x-request-id"] == "req_1"  # the second's own run (Upstream counts)
    assert REPLAY_HEADER not in taken_over.headers


class Unreachable:
    async def claim(self, slot: str, claim: Claim, lease_s: float) -> Record | None:
        raise StoreUnavailable

    async def keep(self, slot: str, claim: Claim, answer: StoredAnswer, window_s: float) -> None:
        raise AssertionError("nothing claimed, nothing kept")

    async def release(self, slot: str, claim: Claim) -> None:
        raise AssertionError("nothing claimed, nothing released")

    async def renew(self, slot: str, claim: Claim, lease_s: float) -> None:
        raise AssertionError("nothing claimed, nothing renewed")


async def test_without_a_reachable_store_each_request_runs() -> None:
    outcomes: list[str] = []
    idempotent = IdempotentRequests(Unreachable(), 60.0, 5.0, 1000, count=outcomes.append)
    upstream = Upstream()

    await serve(idempotent, upstream, "req_1")
    await serve(idempotent, upstream, "req_2")

    assert upstream.runs == 2
    assert outcomes == ["store_unavailable", "store_unavailable"]
