"""10,000 hostile requests to the OpenAI endpoints: never a 5xx, always an OpenAI error object.

Bodies (each sent with two generated header sets) are valid-ish OpenAI requests mutated (wrong types, huge numbers, unicode, nested garbage,
missing and unknown fields, bad `gateway` directives) or raw garbage; headers carry odd
X-Gateway-* values. FUZZ_REQUESTS (default 10000) sets how many are sent, FUZZ_BUDGET_S (default
60) bounds the time spent; the figure sent is printed.
"""

from __future__ import annotations

import itertools
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from litestar.testing import TestClient

from tests.fuzz.stack import build_stack
from tests.fuzz.strategies import FuzzRequest, fuzz_requests
from tests.support.openapi import validate

TARGET = int(os.environ.get("FUZZ_REQUESTS", "10000"))
BUDGET_S = float(os.environ.get("FUZZ_BUDGET_S", "60"))
BODIES_PER_EXAMPLE = 5  # fewer, larger hypothesis examples: less overhead per request
HEADER_SETS = 2  # each body is sent twice, with two generated header sets
PER_EXAMPLE = BODIES_PER_EXAMPLE * HEADER_SETS


@dataclass
class Tally:
    deadline: float
    sent: int = 0
    statuses: Counter[int] = field(default_factory=Counter)

    @property
    def done(self) -> bool:
        return self.sent >= TARGET or time.monotonic() > self.deadline


def check_response(request: FuzzRequest, response: httpx.Response) -> None:
    where = f"{request.path} {request.headers!r} {request.body[:300]!r}"
    assert response.status_code < 500, f"{response.status_code} {response.text[:500]} for {where}"
    content_type = response.headers.get("content-type", "")
    if response.status_code >= 400:
        assert content_type.startswith("application/json"), where
        validate("ErrorResponse", response.json())
    elif content_type.startswith("text/event-stream"):
        assert response.text.endswith("data: [DONE]\n\n"), f"{response.text[-300:]} for {where}"
    else:
        assert content_type.startswith("application/json"), where
        assert isinstance(response.json(), dict), where


def test_fuzzed_requests_never_get_a_server_error(tmp_path: Path) -> None:
    stack = build_stack(tmp_path)
    tally = Tally(deadline=time.monotonic() + BUDGET_S)
    authorization = stack.team_auth["Authorization"]

    with TestClient(stack.app) as client:
        requests = fuzz_requests(authorization, HEADER_SETS)

        @given(st.lists(requests, min_size=BODIES_PER_EXAMPLE, max_size=BODIES_PER_EXAMPLE))
        @settings(
            max_examples=max(1, TARGET // PER_EXAMPLE),
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def send(bodies: list[list[FuzzRequest]]) -> None:
            for request in itertools.chain.from_iterable(bodies):
                if tally.done:
                    return
                headers = {name.encode(): value for name, value in request.headers.items()}
                response = client.post(request.path, content=request.body, headers=headers)
                tally.sent += 1
                tally.statuses[response.status_code] += 1
                check_response(request, response)

        send()

    print(f"fuzzed requests sent: {tally.sent}, statuses: {dict(sorted(tally.statuses.items()))}")
    assert tally.statuses[200] > 0 and tally.statuses[400] > 0  # both kinds really reached the gateway
