"""count_tokens with the anthropic SDK: bound by the key's request rate like any request (a 429
with retry-after once the key's requests per minute are spent, nothing sent upstream), and each
count forwarded to Anthropic recorded at no cost so that the operator sees the calls; an estimate
asks no upstream and leaves no record."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import anthropic
import pytest

from tests.e2e.stacks.messages import MessagesStack, messages_stack
from tests.support.gateway import Team, create_team

HELLO = [{"role": "user", "content": "Count the tokens of this sentence, please."}]
COUNT_PATH = "/v1/messages/count_tokens"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MessagesStack]:
    yield from messages_stack(tmp_path_factory.mktemp("count-tokens"))


def key_with(stack: MessagesStack, team: Team, **limits: object) -> str:
    created = stack.admin.post("/admin/keys", json={"team_id": team.id, "name": "counting", **limits})
    assert created.status_code == 201, created.text
    key: str = created.json()["key"]
    return key


def test_count_tokens_spends_the_keys_request_rate_and_is_recorded_at_no_cost(stack: MessagesStack) -> None:
    stack.upstream.clear()
    team = create_team(stack.admin, "count-limits")
    client = stack.client(key_with(stack, team, rpm_limit=2))

    counts = [client.messages.count_tokens(model="claude", messages=HELLO).input_tokens for _ in range(2)]
    with pytest.raises(anthropic.RateLimitError) as limited:
        client.messages.count_tokens(model="claude", messages=HELLO)
    assert int(limited.value.response.headers["retry-after"]) >= 1
    refusal = limited.value.body  # Anthropic's envelope, as on /v1/messages
    assert isinstance(refusal, dict) and refusal["type"] == "error"
    assert refusal["error"]["type"] == "rate_limit_error"
    # the same key's next request of any kind waits as well: one rate for both
    with pytest.raises(anthropic.RateLimitError):
        client.messages.create(model="claude", max_tokens=8, messages=HELLO)

    served = stack.upstream.stats()["paths"].get(COUNT_PATH, 0)
    print(f"\ncount_tokens calls: 3 sent, {served} served upstream")
    assert served == 2

    records = stack.events(team.id, 2)
    assert len(records) == 2
    assert sorted(r["prompt_tokens"] for r in records) == sorted(counts)
    for record in records:
        assert record["endpoint"] == "messages/count_tokens" and record["status"] == 200
        assert Decimal(record["cost"]) == 0 and record["completion_tokens"] == 0
        assert record["provider"] == "msg-anthropic" and record["model"] == "claude"


def test_an_estimated_count_is_limited_but_not_recorded(stack: MessagesStack) -> None:
    stack.upstream.clear()
    team = create_team(stack.admin, "count-estimates")
    client = stack.client(key_with(stack, team, rpm_limit=1))

    estimated = client.messages.with_raw_response.count_tokens(model="gpt", messages=HELLO)
    assert estimated.headers["x-gateway-token-count"] == "estimated"
    with pytest.raises(anthropic.RateLimitError):
        client.messages.count_tokens(model="gpt", messages=HELLO)
    assert stack.upstream.stats()["total"] == 0

    # a request that is recorded (with the team's other key): once it is written, so would the
    # estimate's record be, had it one
    stack.client(team.key).messages.create(model="claude", max_tokens=8, messages=HELLO)
    [record] = stack.events(team.id, 1)
    assert record["endpoint"] == "messages"
