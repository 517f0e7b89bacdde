"""Nothing served is free: a stream the client abandons before its usage arrives, and a 200 answer
that carries no usage, are billed from the gateway's estimate of the whole prompt, on every
endpoint, marked estimated.

The official openai and anthropic SDKs against `gateway serve` and `gateway mock-upstream`
(tests/e2e/stacks/responses.py): Responses passed through (gpt) and translated (llama to chat,
claude to the Messages API); Messages translated (llama) and native (claude).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import anthropic
import pytest

from tests.e2e.stacks.responses import ResponsesStack, responses_stack
from tests.support.gateway import Team
from tests.support.upstream import RunningUpstream

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

PROMPT = "Classify the sentiment of this customer review, word by word. " * 6_400  # ~400 KB
REAL_TOKENS = len(PROMPT.encode()) // 4  # ~100k: the mock's own count, 4 bytes a token
MESSAGE: Any = [{"role": "user", "content": PROMPT}]
INPUT_PRICE = {"gpt": Decimal("1.25"), "llama": Decimal("0.60"), "claude": Decimal(3)}  # USD / 1M
SLOW = {"chunks": 200, "chunk_delay_ms": 20, "completion_tokens": 400}  # ~4 s: left long before the end


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ResponsesStack]:
    yield from responses_stack(tmp_path_factory.mktemp("estimated"))


@pytest.fixture
def upstream(stack: ResponsesStack) -> Iterator[RunningUpstream]:
    stack.upstream.set_behaviour()
    yield stack.upstream
    stack.upstream.set_behaviour()


def anthropic_client(stack: ResponsesStack, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=stack.gateway.base_url, api_key=key, max_retries=0)


def the_record(stack: ResponsesStack, team: Team, request_id: str) -> dict[str, Any]:
    for _ in range(3):
        for record in stack.records(team, 1):
            if record["request_id"] == request_id:
                return record
    raise AssertionError(f"no usage record {request_id}")


def assert_billed_whole_prompt(record: dict[str, Any], alias: str, status: int) -> None:
    """Estimated, with the prompt's real size (within the ~4 bytes a token estimate), and priced."""
    assert (record["status"], record["usage_source"]) == (status, "estimated")
    assert abs(record["prompt_tokens"] - REAL_TOKENS) <= REAL_TOKENS * 0.05
    prompt_cost = Decimal(record["prompt_tokens"]) * INPUT_PRICE[alias] / 1_000_000
    assert Decimal(record["cost"]) >= prompt_cost > 0


# --- 1. abandoned streams ---------------------------------------------------------------------


def abandon_responses(stack: ResponsesStack, key: str, alias: str) -> str:
    """Stream a Response, read up to the first text delta, close; returns the request id."""
    stream = stack.client(key).responses.create(model=alias, input=PROMPT, stream=True)
    try:
        for event in stream:
            if event.type == "response.output_text.delta":
                break
        else:
            raise AssertionError("the stream ended before its first text delta")
        return str(stream.response.headers["x-request-id"])
    finally:
        stream.close()


def abandon_messages(stack: ResponsesStack, key: str, alias: str) -> str:
    stream = anthropic_client(stack, key).messages.create(
        model=alias, max_tokens=1024, messages=MESSAGE, stream=True
    )
    try:
        for event in stream:
            if event.type == "content_block_delta":
                break
        else:
            raise AssertionError("the stream ended before its first text delta")
        return str(stream.response.headers["x-request-id"])
    finally:
        stream.close()


ABANDONED: dict[str, tuple[Callable[[ResponsesStack, str, str], str], str]] = {
    "responses-translated": (abandon_responses, "llama"),
    "responses-native": (abandon_responses, "gpt"),
    "messages-translated": (abandon_messages, "llama"),
}


@pytest.mark.parametrize("case", list(ABANDONED))
def test_an_abandoned_stream_is_billed_its_whole_prompt(
    stack: ResponsesStack, upstream: RunningUpstream, case: str
) -> None:
    abandon, alias = ABANDONED[case]
    team = stack.new_team(f"abandoned-{case}")
    upstream.set_behaviour(**SLOW)

    request_id = abandon(stack, team.key, alias)

    record = the_record(stack, team, request_id)
    assert record["error_code"] == "client_disconnected"
    assert_billed_whole_prompt(record, alias, 499)
    assert record["completion_tokens"] < 200  # what was sent before the client left


# --- 2. answers without usage -------------------------------------------------------------------


def chat(stack: ResponsesStack, key: str, alias: str) -> str:
    raw = stack.client(key).chat.completions.with_raw_response.create(model=alias, messages=MESSAGE)
    assert raw.parse().choices[0].message.content
    return raw.headers["x-request-id"]


def completions(stack: ResponsesStack, key: str, alias: str) -> str:
    raw = stack.client(key).completions.with_raw_response.create(model=alias, prompt=PROMPT)
    assert raw.parse().choices[0].text
    return raw.headers["x-request-id"]


def embeddings(stack: ResponsesStack, key: str, alias: str) -> str:
    raw = stack.client(key).embeddings.with_raw_response.create(model=alias, input=PROMPT)
    assert raw.parse().data[0].embedding
    return raw.headers["x-request-id"]


def responses(stack: ResponsesStack, key: str, alias: str) -> str:
    raw = stack.client(key).responses.with_raw_response.create(model=alias, input=PROMPT)
    assert raw.parse().output_text
    return raw.headers["x-request-id"]


def messages(stack: ResponsesStack, key: str, alias: str) -> str:
    raw = anthropic_client(stack, key).messages.with_raw_response.create(
        model=alias, max_tokens=64, messages=MESSAGE
    )
    assert raw.parse().content
    return raw.headers["x-request-id"]


WITHOUT_USAGE: dict[str, tuple[Callable[[ResponsesStack, str, str], str], str]] = {
    "chat": (chat, "llama"),
    "chat-translated": (chat, "claude"),
    "completions": (completions, "llama"),
    "embeddings": (embeddings, "llama"),
    "responses-native": (responses, "gpt"),
    "responses-translated": (responses, "llama"),
    "responses-translated-anthropic": (responses, "claude"),
    "messages-native": (messages, "claude"),
    "messages-translated": (messages, "llama"),
}


@pytest.mark.parametrize("case", list(WITHOUT_USAGE))
def test_an_answer_without_usage_is_billed_from_the_estimate(
    stack: ResponsesStack, upstream: RunningUpstream, case: str
) -> None:
    send, alias = WITHOUT_USAGE[case]
    team = stack.new_team(f"no-usage-{case}")
    upstream.set_behaviour(omit_usage=True)

    request_id = send(stack, team.key, alias)

    record = the_record(stack, team, request_id)
    assert_billed_whole_prompt(record, alias, 200)
    if case == "embeddings":
        assert record["completion_tokens"] == 0
    else:
        assert 0 < record["completion_tokens"] < 200  # the answer's words, not its envelope
