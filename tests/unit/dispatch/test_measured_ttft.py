"""`measure_ttft`: a non-streaming chat request streamed from a real `gateway mock-upstream` over
HTTP, answered as the assembled completion, with its time to first token recorded.

The mock answers the same request the same way streamed or not, so the assembled answer is checked
against the mock's own non-streaming answer to it (through a provider without measure_ttft).
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gateway.dispatch.executor import Attempts, Executor
from gateway.dispatch.http1.pool import UpstreamPool
from gateway.errors import UpstreamError
from gateway.providers.base import Endpoint, UpstreamCall
from gateway.routing.deployment import DeploymentTable
from gateway.routing.health import HealthBoard
from gateway.settings import CircuitSettings, ConfigError, RetrySettings, load_catalog
from tests.support.catalogs import catalog, deployment, model, provider
from tests.support.openapi import validate
from tests.support.upstream import RunningUpstream, mock_upstream_fixture

RETRY = RetrySettings(max_attempts=2, backoff_base_s=0.001, backoff_max_s=0.002, retry_after_cap_s=0.001)
TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(scope="module")
def mock() -> Iterator[RunningUpstream]:
    yield from mock_upstream_fixture()


@pytest.fixture
def upstream(mock: RunningUpstream) -> Iterator[RunningUpstream]:
    mock.clear()
    mock.set_behaviour(chunks=5)
    yield mock
    mock.set_behaviour()


@dataclass
class Answer:
    body: dict[str, Any]
    usage: object
    attempts: Attempts


class Sender:
    """One executor over two providers at the same mock: `measured` (measure_ttft) and `plain`."""

    def __init__(self, upstream: RunningUpstream) -> None:
        url = f"{upstream.base_url}/v1"
        providers = [
            provider(name, region="eu", base_url=url, measure_ttft=measured)
            for name, measured in (("measured", True), ("plain", False))
        ]
        served = catalog(
            *providers, models=[model(p.name, deployment(p, "m")) for p in providers], retry=RETRY
        )
        table = DeploymentTable.from_catalog(served)
        self.deployments = {d.provider.name: d for d in table.all()}
        health = HealthBoard([d.id for d in table.all()], CircuitSettings(failure_threshold=100))
        self.executor = Executor(served, health, UpstreamPool(), rng=random.Random(3))

    async def send(self, provider: str, **body: Any) -> Answer:
        attempts = Attempts()
        response = await self.executor.send(
            self.deployments[provider], call(**body), attempts, RETRY.max_attempts
        )
        return Answer(msgspec.json.decode(response.body), response.usage, attempts)


@pytest.fixture
async def sender(upstream: RunningUpstream) -> AsyncIterator[Sender]:
    sender = Sender(upstream)
    yield sender
    await sender.executor.aclose()


def call(**body: Any) -> UpstreamCall:
    request = {"model": "alias", "messages": [{"role": "user", "content": "weather in Oslo"}], **body}
    return UpstreamCall(
        endpoint=Endpoint.CHAT,
        body=request,
        upstream_model="m",
        stream=False,
        client_wants_usage=False,
        team_id="team-1",
    )


def without_ids(body: dict[str, Any]) -> dict[str, Any]:
    """A chat completion without what differs between two answers to one request."""
    rest = {k: v for k, v in body.items() if k not in ("id", "created")}
    rest["choices"] = [{**choice, "message": _message(choice["message"])} for choice in body["choices"]]
    return rest


def _message(message: dict[str, Any]) -> dict[str, Any]:
    kept = {k: v for k, v in message.items() if k != "annotations"}  # the mock's, not assembled
    if "tool_calls" in kept:
        assert all(call["id"].startswith("call_") for call in kept["tool_calls"])
        kept["tool_calls"] = [{k: v for k, v in call.items() if k != "id"} for call in kept["tool_calls"]]
    return kept


async def test_a_measured_request_is_streamed_and_answered_as_the_upstream_would_have(
    sender: Sender, upstream: RunningUpstream
) -> None:
    measured = await sender.send("measured")
    plain = await sender.send("plain")

    streamed, direct = upstream.requests()
    assert streamed["body"]["stream"] is True
    assert streamed["body"]["stream_options"] == {"include_usage": True}
    assert "stream" not in direct["body"]
    validate("CreateChatCompletionResponse", measured.body)
    assert measured.body["object"] == "chat.completion"
    assert measured.body["id"].startswith("chatcmpl-")
    assert without_ids(measured.body) == without_ids(plain.body)
    assert measured.usage == plain.usage and measured.usage is not None


async def test_a_measured_request_has_a_ttft_and_a_plain_one_has_none(sender: Sender) -> None:
    measured = await sender.send("measured")
    plain = await sender.send("plain")

    assert measured.attempts.ttft_s is not None
    assert 0 < measured.attempts.ttft_s <= measured.attempts.upstream_s  # the first token comes first
    assert plain.attempts.ttft_s is None  # the whole answer's time is no time to a first token


async def test_tool_calls_and_several_choices_are_assembled(sender: Sender) -> None:
    forced = {"tools": [TOOL], "tool_choice": "required"}
    measured, plain = await sender.send("measured", **forced), await sender.send("plain", **forced)
    assert measured.body["choices"][0]["finish_reason"] == "tool_calls"
    assert measured.body["choices"][0]["message"]["content"] is None
    assert without_ids(measured.body) == without_ids(plain.body)

    measured, plain = await sender.send("measured", n=3), await sender.send("plain", n=3)
    assert [c["index"] for c in measured.body["choices"]] == [0, 1, 2]
    assert without_ids(measured.body) == without_ids(plain.body)


async def test_a_request_for_logprobs_is_not_streamed(sender: Sender, upstream: RunningUpstream) -> None:
    answer = await sender.send("measured", logprobs=True)

    assert "stream" not in upstream.requests()[-1]["body"]
    assert answer.attempts.ttft_s is None


async def test_a_stream_cut_short_fails_like_a_cut_answer_and_is_retried(
    sender: Sender, upstream: RunningUpstream
) -> None:
    upstream.set_behaviour(chunks=5, fail_after_chunks=2)

    with pytest.raises(UpstreamError) as failed:
        await sender.send("measured")

    assert failed.value.retryable
    assert len(upstream.requests()) == RETRY.max_attempts


async def test_an_upstream_error_status_is_classified_as_for_a_plain_request(
    sender: Sender, upstream: RunningUpstream
) -> None:
    upstream.set_behaviour(fail_rate=1, fail_status=400)

    with pytest.raises(UpstreamError) as measured:
        await sender.send("measured")
    with pytest.raises(UpstreamError) as plain:
        await sender.send("plain")

    assert (type(measured.value), measured.value.retryable) == (type(plain.value), False)


def test_measure_ttft_is_for_openai_compatible_providers(tmp_path: Path) -> None:
    catalog = """
providers:
  - {name: up, kind: %s, region: eu, base_url: "http://up.invalid/v1", measure_ttft: true}
models:
  - {name: chat, deployments: [{provider: up, model: m}]}
"""
    path = tmp_path / "gateway.yaml"
    path.write_text(catalog % "openai")
    assert load_catalog(path, {}).providers[0].measure_ttft is True
    path.write_text(catalog % "anthropic")
    with pytest.raises(ConfigError, match=r"providers\[0\]\.measure_ttft"):
        load_catalog(path, {})


@pytest.mark.parametrize(
    ("settings", "job_line", "measured"),
    [
        ("", False, False),  # an interactive request to a provider without a queue: sent as it came
        ("", True, True),  # a Batch API job's line: every job has a prefill/decode split
        (", capacity: {max_concurrency: 4}", False, True),  # the gateway holds this queue
        (", capacity: {load_metrics: true}, measure_ttft: false", True, False),  # opted out
        (", measure_ttft: true", False, True),
    ],
)
def test_throughput_is_measured_by_default_where_batches_run(
    tmp_path: Path, settings: str, job_line: bool, measured: bool
) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(
        "providers:\n"
        f'  - {{name: up, kind: openai, region: eu, base_url: "http://up.invalid/v1"{settings}}}\n'
        "models:\n  - {name: chat, deployments: [{provider: up, model: m}]}\n"
    )
    assert load_catalog(path, {}).providers[0].measures_ttft(job_line) is measured


def test_anthropic_answers_are_never_streamed_to_measure(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(
        "providers:\n"
        '  - {name: up, kind: anthropic, region: eu, base_url: "http://up.invalid", capacity: {max_concurrency: 4}}\n'
        "models:\n  - {name: chat, deployments: [{provider: up, model: m}]}\n"
    )
    assert load_catalog(path, {}).providers[0].measures_ttft(job_line=True) is False
