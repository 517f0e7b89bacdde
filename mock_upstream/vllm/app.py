"""The simulated vLLM over HTTP: a raw ASGI app serving N replicas on one port, replica i under
the path prefix `/r{i}` (no prefix: replica 0), each with `/v1/chat/completions`, `/metrics` and
`/_sim/stats`; `run_simulator` runs it under uvicorn."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

import msgspec
import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry

from mock_upstream.cache import PromptUsage
from mock_upstream.content import VOCABULARY
from mock_upstream.openai_format import DONE_FRAME, ReplyHeader, error_body, frame, usage_object
from mock_upstream.vllm.driver import EngineDriver
from mock_upstream.vllm.engine import Engine, EngineConfig, EngineError, Sequence
from mock_upstream.vllm.metrics import metrics_registry, metrics_text, stats_object
from mock_upstream.vllm.tokens import prompt_blocks, prompt_text

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

MODEL = "sim-vllm"
_REPLICA_PATH = re.compile(r"^/r(\d+)(/.*)$")
_JSON = [(b"content-type", b"application/json")]
_SSE = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]


@dataclass(slots=True)
class Replica:
    engine: Engine
    driver: EngineDriver
    registry: CollectorRegistry


def new_replica(config: EngineConfig, clock: Callable[[], float]) -> Replica:
    engine = Engine(config, clock)
    return Replica(engine, EngineDriver(engine), metrics_registry(engine, MODEL))


async def _body(receive: Receive) -> bytes:
    parts: list[bytes] = []
    while True:
        message = await receive()
        parts.append(message.get("body", b""))
        if message["type"] == "http.disconnect" or not message.get("more_body", False):
            return b"".join(parts)


async def _respond(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _token_text(index: int) -> str:
    return VOCABULARY[index % len(VOCABULARY)] + " "


@dataclass(frozen=True, slots=True)
class ChatRequest:
    messages: list[Any]
    max_tokens: int
    stream: bool
    include_usage: bool
    model: str


def parse_chat(raw: bytes, default_max_tokens: int) -> ChatRequest | str:
    """The request, or why it is not a valid one."""
    try:
        body = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return "the request body must be JSON"
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return "'messages' is a required property"
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is None:
        max_tokens = default_max_tokens
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        return "max_tokens must be a positive integer"
    options = body.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    model = body["model"] if isinstance(body.get("model"), str) else MODEL
    return ChatRequest(body["messages"], max_tokens, body.get("stream") is True, include_usage, model)


class SimulatedVllmApp:
    def __init__(self, replicas: list[Replica]) -> None:
        self.replicas = replicas

    async def close(self) -> None:
        for replica in self.replicas:
            await replica.driver.close()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await self.close()
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        path, index = scope["path"], 0
        prefixed = _REPLICA_PATH.match(path)
        if prefixed:
            index, path = int(prefixed.group(1)), prefixed.group(2)
        if index >= len(self.replicas):
            await _respond(send, 404, error_body(404, f"no replica {index}"), _JSON)
            return
        await self._route(self.replicas[index], scope["method"], path, receive, send)

    async def _route(self, replica: Replica, method: str, path: str, receive: Receive, send: Send) -> None:
        if method == "POST" and path == "/v1/chat/completions":
            await self._chat(replica, await _body(receive), send)
        elif method == "GET" and path == "/metrics":
            await _respond(
                send, 200, metrics_text(replica.registry), [(b"content-type", CONTENT_TYPE_LATEST.encode())]
            )
        elif method == "GET" and path == "/_sim/stats":
            await _respond(send, 200, msgspec.json.encode(stats_object(replica.engine)), _JSON)
        elif method == "DELETE" and path == "/_sim/stats":
            replica.engine.reset_stats()
            await _respond(send, 204, b"", [])
        else:
            await _respond(send, 404, error_body(404, f"Unknown request URL: {method} {path}"), _JSON)

    async def _chat(self, replica: Replica, raw: bytes, send: Send) -> None:
        request = parse_chat(raw, replica.engine.config.default_max_tokens)
        if isinstance(request, str):
            await _respond(send, 400, error_body(400, request), _JSON)
            return
        prompt = prompt_blocks(request.model, prompt_text(request.messages), replica.engine.config.block_size)
        try:
            sequence = replica.driver.submit(uuid.uuid4().hex, prompt, request.max_tokens)
        except EngineError as exc:
            await _respond(send, 400, error_body(400, str(exc)), _JSON)
            return
        head = ReplyHeader.new("chatcmpl-", request.model)
        if request.stream:
            await self._stream(replica, sequence, head, request.include_usage, send)
            return
        words = [_token_text(event.index) async for event in replica.driver.tokens(sequence)]
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(words),
            "refusal": None,
            "annotations": [],
        }
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": "length"}
        body = {**head.envelope("chat.completion"), "choices": [choice], "usage": _usage(sequence)}
        await _respond(send, 200, msgspec.json.encode(body), _JSON)

    async def _stream(
        self, replica: Replica, sequence: Sequence, head: ReplyHeader, include_usage: bool, send: Send
    ) -> None:
        """One chunk per sampled token, the role chunk with the first (after the prefill)."""
        await send({"type": "http.response.start", "status": 200, "headers": _SSE})
        base = head.envelope("chat.completion.chunk")
        async for event in replica.driver.tokens(sequence):
            if event.index == 0:
                role = {"role": "assistant", "content": ""}
                await _send_frame(send, {**base, "choices": [_delta(role, None)]})
            await _send_frame(
                send, {**base, "choices": [_delta({"content": _token_text(event.index)}, None)]}
            )
        await _send_frame(send, {**base, "choices": [_delta({}, "length")]})
        if include_usage:
            await _send_frame(send, {**base, "choices": [], "usage": _usage(sequence)})
        await send({"type": "http.response.body", "body": DONE_FRAME, "more_body": False})


def _delta(delta: dict[str, Any], finish_reason: str | None) -> dict[str, Any]:
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}


async def _send_frame(send: Send, payload: dict[str, Any]) -> None:
    await send({"type": "http.response.body", "body": frame(payload), "more_body": True})


def _usage(sequence: Sequence) -> dict[str, Any]:
    prompt = PromptUsage(sequence.prompt.tokens, cache_read=sequence.cached_tokens or 0)
    return usage_object(prompt, sequence.output_tokens)


def create_simulator_app(config: EngineConfig, replicas: int = 1) -> SimulatedVllmApp:
    return SimulatedVllmApp([new_replica(config, time.monotonic) for _ in range(replicas)])


def run_simulator(host: str, port: int, config: EngineConfig, replicas: int) -> None:
    uvicorn.run(
        create_simulator_app(config, replicas),
        host=host,
        port=port,
        loop="auto",
        http="auto",
        access_log=False,
        log_level="warning",
        timeout_graceful_shutdown=1,
    )
