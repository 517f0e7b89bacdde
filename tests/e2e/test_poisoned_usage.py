"""A team key asking the fake provider for a count past the gateway's bound: the fake refuses the
override, the client gets an OpenAI-format error, and metering goes on for everyone."""

from __future__ import annotations

import openai
import pytest

from tests.e2e.conftest import Stack

MESSAGES = [{"role": "user", "content": "count me"}]


def test_an_absurd_count_override_is_refused_and_later_requests_are_recorded(
    stack: Stack, fresh_upstream
) -> None:
    team = stack.new_team("poisoned-override")
    client = stack.client(team.key)

    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="chat", messages=MESSAGES, extra_body={"mock": {"prompt_tokens": 3_000_000_000}}
        )
    assert "prompt_tokens" in refused.value.message
    fresh_upstream.set_behaviour(prompt_tokens=1_000_000_000, completion_tokens=3)  # the bound itself
    for _ in range(5):
        client.chat.completions.create(model="chat", messages=MESSAGES)

    [row] = stack.usage(group_by="team", team_id=team.id)
    assert row["requests"] == 6  # the refused one reached the upstream: recorded, at no cost
    assert (row["prompt_tokens"], row["completion_tokens"]) == (5 * 1_000_000_000, 15)
    assert float(row["cost"]) > 0
