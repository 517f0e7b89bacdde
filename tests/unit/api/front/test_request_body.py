"""A proxied request's body: read only when asked, under the cap and the process's budget of bodies
being read at once, which a declared length takes whole and a body without one as it arrives."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.api.front.request_body import BodyBudget, BodyTooLarge, ClientGone, RequestBody
from gateway.errors import ServiceUnavailable


class Feed:
    """An ASGI `receive` handing out the given messages, counting the calls."""

    def __init__(self, *messages: dict[str, Any]) -> None:
        self.messages = list(messages)
        self.calls = 0

    async def __call__(self) -> dict[str, Any]:
        self.calls += 1
        return self.messages.pop(0)


def piece(body: bytes, more: bool = True) -> dict[str, Any]:
    return {"type": "http.request", "body": body, "more_body": more}


def body_of(feed: Feed, headers: dict[str, str], budget: BodyBudget, max_bytes: int = 100) -> RequestBody:
    return RequestBody.of(feed, headers, max_bytes, budget)  # type: ignore[arg-type]


async def test_a_declared_length_is_taken_from_the_budget_before_the_first_byte() -> None:
    budget = BodyBudget(100)
    held_while_reading = []

    async def receive() -> dict[str, Any]:
        held_while_reading.append(budget.held)
        return piece(b"x" * 60, more=False)

    body = RequestBody.of(receive, {"content-length": "60"}, 100, budget)  # type: ignore[arg-type]
    assert body.unread
    assert await body.read() == b"x" * 60
    assert held_while_reading == [60]
    assert (budget.held, body.unread) == (0, False)


async def test_a_body_that_does_not_fit_the_budget_is_refused_unread() -> None:
    budget = BodyBudget(100, held=50)
    feed = Feed(piece(b"x" * 60, more=False))
    body = body_of(feed, {"content-length": "60"}, budget)
    with pytest.raises(ServiceUnavailable) as refused:
        await body.read()
    assert refused.value.status == 503
    assert refused.value.code == "server_busy"
    assert refused.value.headers == {"retry-after": "1"}
    assert feed.calls == 0
    assert body.unread
    assert budget.held == 50  # nothing taken, nothing given back that was not taken


async def test_a_body_without_a_length_is_counted_as_it_arrives() -> None:
    budget = BodyBudget(100, held=40)
    feed = Feed(*[piece(b"x" * 30)] * 3, piece(b"x" * 30, more=False))
    body = body_of(feed, {"transfer-encoding": "chunked"}, budget)
    with pytest.raises(ServiceUnavailable):
        await body.read()
    assert feed.calls == 3  # 40 + 60 fits, 40 + 90 does not: the last piece was never asked for
    assert budget.held == 40  # the 60 it held went back
    assert body.unread


async def test_the_budget_is_given_back_however_the_read_ends() -> None:
    budget = BodyBudget(1000)
    gone = body_of(Feed(piece(b"x" * 10), {"type": "http.disconnect"}), {"content-length": "50"}, budget)
    with pytest.raises(ClientGone):
        await gone.read()
    too_large = body_of(Feed(piece(b"x" * 80), piece(b"x" * 80)), {"transfer-encoding": "chunked"}, budget)
    with pytest.raises(BodyTooLarge):
        await too_large.read()
    assert budget.held == 0


def test_a_declared_length_over_the_cap_is_refused_before_anything_is_read() -> None:
    feed = Feed()
    with pytest.raises(BodyTooLarge):
        body_of(feed, {"content-length": "101"}, BodyBudget(1000))
    assert feed.calls == 0


@pytest.mark.parametrize(
    ("headers", "has_body"),
    [
        ({}, False),
        ({"content-length": "0"}, False),
        ({"content-length": "5"}, True),
        ({"transfer-encoding": "chunked"}, True),
    ],
)
def test_only_a_request_that_announces_a_body_has_one_left_unread(
    headers: dict[str, str], has_body: bool
) -> None:
    assert body_of(Feed(), headers, BodyBudget(1000)).unread is has_body


async def test_a_length_in_other_digits_than_ascii_is_no_length() -> None:
    body = body_of(Feed(piece(b"{}", more=False)), {"content-length": "\u00b2"}, BodyBudget(1000))
    assert await body.read() == b"{}"
