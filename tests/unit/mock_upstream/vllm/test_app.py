"""The simulated vLLM's ASGI app, driven in-process through httpx.ASGITransport."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import msgspec
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mock_upstream.vllm.app import SimulatedVllmApp, create_simulator_app
from mock_upstream.vllm.engine import EngineConfig
from mock_upstream.vllm.tokens import prompt_blocks, prompt_text

SYSTEM = {"role": "system", "content": "You answer briefly and precisely. " * 30}
VLLM_METRICS = {
    "vllm:cache_config_info",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
    "vllm:num_preemptions",
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
}


@pytest.fixture
async def app() -> AsyncIterator[SimulatedVllmApp]:
    app = create_simulator_app(EngineConfig(time_scale=0.0), replicas=2)
    yield app
    await app.close()


@pytest.fixture
async def client(app: SimulatedVllmApp) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as client:
        yield client


def chat(question: str, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [SYSTEM, {"role": "user", "content": question}], **extra}


async def test_a_second_request_reads_the_shared_system_prompt_from_the_prefix_cache(
    client: httpx.AsyncClient,
) -> None:
    first = (await client.post("/v1/chat/completions", json=chat("one?", max_tokens=3))).json()
    second = (await client.post("/v1/chat/completions", json=chat("two?", max_tokens=3))).json()
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    assert second["usage"]["completion_tokens"] == 3
    assert second["choices"][0]["finish_reason"] == "length"


async def test_a_stream_sends_one_chunk_per_token_then_usage(client: httpx.AsyncClient) -> None:
    body = chat("stream?", max_tokens=5, stream=True, stream_options={"include_usage": True})
    response = await client.post("/v1/chat/completions", json=body)
    lines = [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    chunks = [msgspec.json.decode(line) for line in lines[:-1]]
    deltas = [chunk["choices"][0]["delta"] for chunk in chunks if chunk["choices"]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert len([delta for delta in deltas if delta.get("content")]) == 5
    assert chunks[-1]["usage"]["completion_tokens"] == 5


async def test_metrics_parse_and_replicas_are_independent(client: httpx.AsyncClient) -> None:
    await client.post("/r1/v1/chat/completions", json=chat("metrics?", max_tokens=2))
    families = {
        family.name: family
        for family in text_string_to_metric_families((await client.get("/r1/metrics")).text)
    }
    assert families.keys() >= VLLM_METRICS
    generated = families["vllm:generation_tokens"].samples[0]
    assert generated.name == "vllm:generation_tokens_total" and generated.value == 2
    assert (await client.get("/r1/_sim/stats")).json()["generation_tokens"] == 2
    assert (await client.get("/_sim/stats")).json()["generation_tokens"] == 0  # replica 0
    assert (await client.delete("/r1/_sim/stats")).status_code == 204
    assert (await client.get("/r1/_sim/stats")).json()["generation_tokens"] == 0


def metric_lines(text: str) -> dict[str, str]:
    """Each sample's line by its name and labels."""
    return {line.rsplit(" ", 1)[0]: line for line in text.splitlines() if not line.startswith("#")}


@pytest.mark.parametrize("sharing", [True, False])
async def test_metrics_carry_the_cache_config_and_counters_as_vllm_names_them(sharing: bool) -> None:
    config = EngineConfig(time_scale=0.0, num_gpu_blocks=8600, share_prefix_blocks=sharing)
    app = create_simulator_app(config)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as client:
        await client.post("/v1/chat/completions", json=chat("lines?", max_tokens=2))
        lines = metric_lines((await client.get("/metrics")).text)
    await app.close()
    info = (
        'vllm:cache_config_info{block_size="16",cache_dtype="auto",'
        f'enable_prefix_caching="{sharing}",gpu_memory_utilization="0.9",num_gpu_blocks="8600"}}'
    )
    assert lines[info] == f"{info} 1.0"
    model = '{model_name="sim-vllm"}'
    prompt_tokens = prompt_blocks("m", prompt_text(chat("lines?")["messages"]), 16).tokens
    assert lines[f"vllm:prompt_tokens_total{model}"] == f"vllm:prompt_tokens_total{model} {prompt_tokens:.1f}"
    assert lines[f"vllm:generation_tokens_total{model}"] == f"vllm:generation_tokens_total{model} 2.0"
    assert lines[f"vllm:num_preemptions_total{model}"] == f"vllm:num_preemptions_total{model} 0.0"
    for gauge in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        assert lines[f"{gauge}{model}"] == f"{gauge}{model} 0.0"


async def test_bad_requests_get_openai_errors(client: httpx.AsyncClient) -> None:
    missing = await client.post("/v1/chat/completions", json={"model": "m"})
    too_long = await client.post("/v1/chat/completions", json=chat("x", max_tokens=10**6))
    unknown = await client.get("/r7/metrics")
    assert (missing.status_code, too_long.status_code, unknown.status_code) == (400, 400, 404)
    assert missing.json()["error"]["type"] == "invalid_request_error"
