"""OpenTelemetry from a real `gateway serve`: the spans and GenAI metrics it exports over OTLP/HTTP
to a receiver in the test (decoded with the OpenTelemetry protobufs), read back.

A chat request is a SERVER span (a child of the client's traceparent) with one CLIENT span per
upstream attempt, whose context is the traceparent the upstream receives; the GenAI attributes
carry the token counts the client was told; a batch's requests share `session.id`; a Batch API
job's lines share one trace; no prompt or answer text is in anything exported; the token usage
histogram counts input and output tokens apart.

Its own stack: one `gateway serve` in front of `gateway mock-upstream`, a SQLite file, no Redis,
`OTEL_EXPORTER_OTLP_ENDPOINT` pointing at the receiver.
"""

from __future__ import annotations

import io
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest

from tests.support.gateway import GatewayProcess, Team, create_team
from tests.support.otlp_receiver import OtlpReceiver, Span
from tests.support.upstream import RunningUpstream, start_mock_upstream

pytestmark = pytest.mark.e2e
ADMIN_KEY = "admin-telemetry-secret"
PROMPT_TOKENS, CACHED_TOKENS, COMPLETION_TOKENS = 40, 8, 12

CONFIG = """
providers:
  - name: up
    kind: openai
    region: eu-west
    base_url: {upstream}/v1
    timeout_s: 5
models:
  - name: chat
    deployments:
      - provider: up
        model: upstream-chat
        price: {{input: 1, output: 2, cached_input: 0.5}}
retry:
  max_attempts: 2
  backoff_base_s: 0.01
  backoff_max_s: 0.02
jobs: {{poll_interval_s: 0.2}}
"""
ALWAYS_500 = {"mock": {"fail_rate": 1, "fail_status": 500}}  # per request, in the forwarded body


@dataclass
class Traced:
    gateway: GatewayProcess
    upstream: RunningUpstream
    receiver: OtlpReceiver
    team: Team

    def sdk(self, **headers: str) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=self.gateway.base_url + "/v1",
            api_key=self.team.key,
            max_retries=0,
            default_headers=headers,
        )

    def server_span(self, request_id: str) -> Span:
        [span] = self.receiver.wait_for_spans(
            lambda s: s.kind == "SERVER" and s.attributes.get("gateway.request.id") == request_id
        )
        return span

    def children(self, parent: Span, count: int) -> list[Span]:
        return self.receiver.wait_for_spans(lambda s: s.parent_span_id == parent.span_id, count)


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traced]:
    directory = tmp_path_factory.mktemp("telemetry")
    upstream = start_mock_upstream(
        prompt_tokens=PROMPT_TOKENS, cached_tokens=CACHED_TOKENS, completion_tokens=COMPLETION_TOKENS
    )
    config = directory / "gateway.yaml"
    config.write_text(CONFIG.format(upstream=upstream.base_url))
    with OtlpReceiver() as receiver:
        env = {
            "GATEWAY_DATABASE_URL": f"sqlite:///{directory / 'gateway.db'}",
            "GATEWAY_REDIS_URL": "",
            "GATEWAY_WORKERS": "1",
            "GATEWAY_ADMIN_KEY": ADMIN_KEY,
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_SERVICE_NAME": "gateway-e2e",
            "OTEL_BSP_SCHEDULE_DELAY": "50",  # spans out within a tick, metrics every half second
            "OTEL_METRIC_EXPORT_INTERVAL": "500",
        }
        gateway = GatewayProcess(config, env).start()
        admin = httpx.Client(
            base_url=gateway.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=10
        )
        try:
            yield Traced(gateway, upstream, receiver, create_team(admin, "traced"))
        finally:
            admin.close()
            gateway.stop()
            upstream.stop()


def chat(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def test_a_chat_request_is_a_server_span_with_an_attempt_span_under_the_clients_trace(traced: Traced) -> None:
    client_trace, client_parent = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    client = traced.sdk(traceparent=f"00-{client_trace}-{client_parent}-01", **{"x-request-id": "client-7"})
    reply = client.chat.completions.with_raw_response.create(
        model="chat", messages=chat("hello, traced"), max_tokens=50
    )
    completion = reply.parse()

    server = traced.server_span(reply.headers["x-request-id"])
    assert server.resource["service.name"] == "gateway-e2e"
    assert (server.trace_id, server.parent_span_id) == (client_trace, client_parent)
    assert server.name == "chat chat"
    assert completion.usage is not None
    expected = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "chat",
        "gen_ai.response.model": "upstream-chat",
        "gen_ai.request.max_tokens": 50,
        "gen_ai.usage.input_tokens": completion.usage.prompt_tokens,
        "gen_ai.usage.output_tokens": completion.usage.completion_tokens,
        "gen_ai.usage.cache_read.input_tokens": CACHED_TOKENS,
        "gen_ai.usage.cache_creation.input_tokens": 0,
        "gateway.team.id": traced.team.id,
        "gateway.key.id": traced.team.key_id,
        "gateway.deployment": "up/upstream-chat",
        "gateway.provider": "up",
        "gateway.region": "eu-west",
        "gateway.client_request.id": "client-7",
        "http.response.status_code": 200,
    }
    assert {name: server.attributes.get(name) for name in expected} == expected
    assert server.attributes["gateway.cost_usd"] == pytest.approx(float(reply.headers["x-gateway-cost"]))
    assert server.attributes["gateway.queue_ms"] >= 0
    print(f"\nserver span attributes: {sorted(server.attributes)}")

    [attempt] = traced.children(server, 1)
    assert attempt.kind == "CLIENT"
    assert attempt.trace_id == client_trace
    assert attempt.attributes["gateway.attempt"] == 1
    assert attempt.attributes["gen_ai.request.model"] == "upstream-chat"
    assert attempt.attributes["gen_ai.usage.output_tokens"] == completion.usage.completion_tokens
    assert [e.name for e in server.events] == ["gateway.queue_wait"]

    # the upstream was asked under the attempt's span: its own spans would be the attempt's children
    [sent] = [r for r in traced.upstream.requests() if "hello, traced" in json.dumps(r["body"])]
    headers = {name.lower(): value for name, value in sent["headers"].items()}
    assert headers["traceparent"] == f"00-{client_trace}-{attempt.span_id}-01"


def test_each_upstream_attempt_is_a_span_of_its_own(traced: Traced) -> None:
    reply = traced.sdk().chat.completions.with_raw_response.create
    with pytest.raises(openai.APIStatusError) as failed:
        reply(model="chat", messages=chat("failing twice"), extra_body=ALWAYS_500)

    server = traced.server_span(failed.value.response.headers["x-request-id"])
    attempts = sorted(traced.children(server, 2), key=lambda s: s.attributes["gateway.attempt"])
    assert [a.attributes["gateway.attempt"] for a in attempts] == [1, 2]
    assert all(a.status == 2 and a.attributes.get("error.type") for a in attempts)  # ERROR, and its kind
    assert server.attributes["http.response.status_code"] == failed.value.status_code
    assert server.attributes.get("error.type")
    assert len([e for e in server.events if e.name == "gateway.queue_wait"]) == 2


def test_a_batchs_requests_share_their_session_id(traced: Traced) -> None:
    batch = f"nightly-{uuid.uuid4().hex[:8]}"
    client = traced.sdk(**{"x-gateway-batch": batch})
    ids = [
        client.chat.completions.with_raw_response.create(model="chat", messages=chat(f"item {i}")).headers[
            "x-request-id"
        ]
        for i in range(3)
    ]
    alone = traced.sdk().chat.completions.with_raw_response.create(model="chat", messages=chat("alone"))

    spans = [traced.server_span(request_id) for request_id in ids]
    assert {(s.attributes["session.id"], s.attributes["gateway.batch.id"]) for s in spans} == {(batch, batch)}
    assert len({s.trace_id for s in spans}) == 3  # a session, not a trace
    alone_span = traced.server_span(alone.headers["x-request-id"])
    assert "session.id" not in alone_span.attributes
    # a request without a traceparent starts a trace of its own, which its log line names
    logged = [json.loads(line) for line in traced.gateway.logs().splitlines() if alone_span.trace_id in line]
    assert [(line["event"], line["request_id"]) for line in logged] == [
        ("request", alone.headers["x-request-id"])
    ]


def test_a_jobs_lines_share_one_trace(traced: Traced) -> None:
    client = traced.sdk()
    lines = [
        {
            "custom_id": f"line-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "chat", "messages": chat(f"job line {i}")},
        }
        for i in range(3)
    ]
    content = "".join(json.dumps(line) + "\n" for line in lines).encode()
    uploaded = client.files.create(file=("in.jsonl", io.BytesIO(content)), purpose="batch")
    job = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    deadline = time.monotonic() + 60
    while client.batches.retrieve(job.id).status not in ("completed", "failed", "expired", "cancelled"):
        assert time.monotonic() < deadline, "the job did not finish"
        time.sleep(0.2)
    assert client.batches.retrieve(job.id).status == "completed"

    spans = traced.receiver.wait_for_spans(
        lambda s: s.kind == "SERVER" and s.attributes.get("gateway.batch.id") == job.id, count=3
    )
    assert len(spans) == 3
    assert len({s.trace_id for s in spans}) == 1  # the job's trace
    assert len({s.parent_span_id for s in spans}) == 1  # under the job's root
    assert {s.attributes["session.id"] for s in spans} == {job.id}
    assert all(s.attributes["gen_ai.usage.output_tokens"] == COMPLETION_TOKENS for s in spans)
    others = traced.receiver.spans()
    assert {s.trace_id for s in others if s.kind == "SERVER" and s not in spans}.isdisjoint(
        {spans[0].trace_id}
    )
    attempts = [s for s in others if s.parent_span_id in {line.span_id for line in spans}]
    assert len(attempts) == 3 and {s.trace_id for s in attempts} == {spans[0].trace_id}


def test_no_prompt_or_answer_text_is_exported(traced: Traced) -> None:
    secret = f"confidential-{uuid.uuid4().hex}"
    client = traced.sdk()
    answer = client.chat.completions.with_raw_response.create(model="chat", messages=chat(secret))
    stream = client.chat.completions.create(model="chat", messages=chat(secret + " streamed"), stream=True)
    said = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    traced.server_span(answer.headers["x-request-id"])
    traced.receiver.wait_for_spans(lambda s: s.kind == "SERVER" and s.attributes.get("gen_ai.request.stream"))
    time.sleep(1.0)  # a metrics export too

    everything = b"".join(traced.receiver.raw)
    assert secret.encode() not in everything
    answer_text = answer.parse().choices[0].message.content
    assert answer_text and answer_text.encode() not in everything
    assert said and said.encode() not in everything


def test_the_genai_metrics_count_tokens_by_type(traced: Traced) -> None:
    client = traced.sdk()
    completion = client.chat.completions.create(model="chat", messages=chat("metered"))
    assert completion.usage is not None
    list(client.chat.completions.create(model="chat", messages=chat("metered stream"), stream=True))

    def by_type(points: list[Any]) -> dict[str, Any]:
        return {
            p.attributes["gen_ai.token.type"]: p
            for p in points
            if p.attributes["gen_ai.request.model"] == "chat"
        }

    points = traced.receiver.wait_for_points(
        "gen_ai.client.token.usage", lambda found: {"input", "output"} <= set(by_type(found))
    )
    tokens = by_type(points)
    assert tokens["input"].kind == "histogram"
    assert tokens["input"].attributes["gen_ai.provider.name"] == "openai"
    assert tokens["input"].attributes["gen_ai.response.model"] == "upstream-chat"
    assert tokens["input"].count >= 2 and tokens["output"].count >= 2
    assert tokens["input"].total >= 2 * PROMPT_TOKENS
    assert tokens["output"].total >= 2 * COMPLETION_TOKENS
    durations = traced.receiver.wait_for_points("gen_ai.client.operation.duration", bool)
    assert sum(p.count for p in durations) >= 2
    first_chunks = traced.receiver.wait_for_points("gen_ai.client.operation.time_to_first_chunk", bool)
    assert sum(p.count for p in first_chunks) >= 1  # the stream's
    print(
        f"\ntoken usage: input {tokens['input'].total:.0f} in {tokens['input'].count} requests, "
        f"output {tokens['output'].total:.0f}; durations {sum(p.count for p in durations)}"
    )
