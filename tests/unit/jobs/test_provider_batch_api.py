"""The calls to the providers' batch APIs (gateway.jobs.provider_batch_api), against an
`httpx.MockTransport`: what each call sends where, and a failing call as a ProviderBatchError.
(What the requests hold and how answers are read: tests/unit/providers/*/test_batch_api.py.)"""

from __future__ import annotations

from collections.abc import Callable

import httpx
import msgspec
import pytest

from gateway.jobs.provider_batch_api import batch_api_for, chat_call, line_body
from gateway.providers.anthropic.batch_api import ForeignResultsUrl
from gateway.providers.base import UpstreamCall
from gateway.providers.openai.batch_api import BatchState, ProviderBatchError, Submission
from gateway.settings import Provider, ProviderKind
from tests.support.catalogs import provider

OPENAI = provider("openai", base_url="https://api.openai.com/v1", api_key="sk-1")
CLAUDE = provider("claude", ProviderKind.ANTHROPIC, base_url="https://api.anthropic.com", api_key="ak-1")
CALL = chat_call({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, "m-up", "team", None, None)
COMPLETION = {
    "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m-up",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
}  # fmt: skip


def client(answer: Callable[[httpx.Request], httpx.Response], seen: list[httpx.Request]) -> httpx.AsyncClient:
    def handler(request: httpx.Request) -> httpx.Response:
        request.read()
        seen.append(request)
        return answer(request)

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


def submission(serving: Provider) -> Submission:
    return Submission(3, CALL, line_body(CALL, serving))


async def test_an_openai_batch_is_an_uploaded_file_then_a_batch_of_it() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/files":
            return httpx.Response(200, json={"id": "file-1", "object": "file"})
        return httpx.Response(200, json={"id": "batch_1", "status": "validating"})

    async with client(answer, seen) as http:
        assert await batch_api_for(http, OPENAI).submit([submission(OPENAI)]) == "batch_1"
    upload, create = seen
    assert (upload.method, str(upload.url)) == ("POST", "https://api.openai.com/v1/files")
    assert upload.headers["authorization"] == "Bearer sk-1"
    assert b'"custom_id":"line-3","method":"POST","url":"/v1/chat/completions","body":{' in upload.content
    assert b'name="purpose"\r\n\r\nbatch' in upload.content
    assert (create.method, str(create.url)) == ("POST", "https://api.openai.com/v1/batches")
    assert create.headers["content-type"] == "application/json"
    assert msgspec.json.decode(create.content)["input_file_id"] == "file-1"


async def test_an_openai_batch_s_results_are_its_output_and_error_files() -> None:
    seen: list[httpx.Request] = []
    rows = {"/v1/files/out/content": {"custom_id": "line-3", "response": {"status_code": 200, "body": COMPLETION}},
            "/v1/files/err/content": {"custom_id": "line-3", "response": None, "error": {"code": "x", "message": "y"}}}  # fmt: skip

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=msgspec.json.encode(rows[request.url.path]) + b"\n")

    calls: dict[int, UpstreamCall] = {3: CALL}
    async with client(answer, seen) as http:
        results = await batch_api_for(http, OPENAI).results(BatchState("b", True, "out", "err"), calls)
    assert [(result.line_no, result.status_code) for result in results] == [(3, 200)]
    assert [request.url.path for request in seen] == list(rows)


async def test_a_message_batch_is_one_request_and_its_results_are_read_from_the_provider() -> None:
    seen: list[httpx.Request] = []
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-up",
               "content": [{"type": "text", "text": "hello"}], "stop_reason": "end_turn",
               "usage": {"input_tokens": 5, "output_tokens": 3}}  # fmt: skip

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/results"):
            row = {"custom_id": "line-3", "result": {"type": "succeeded", "message": message}}
            return httpx.Response(200, content=msgspec.json.encode(row) + b"\n")
        return httpx.Response(200, json={"id": "msgbatch_1", "processing_status": "ended"})

    async with client(answer, seen) as http:
        api = batch_api_for(http, CLAUDE)
        assert await api.submit([submission(CLAUDE)]) == "msgbatch_1"
        state = await api.state("msgbatch_1")
        results = await api.results(state, {3: CALL})
        with pytest.raises(ForeignResultsUrl):
            await api.results(BatchState("m", True, results_url="https://elsewhere.example/r"), {3: CALL})
    create, read, fetch = seen  # nothing was sent to the foreign results_url
    assert str(create.url) == "https://api.anthropic.com/v1/messages/batches"
    assert (create.headers["x-api-key"], create.headers["anthropic-version"]) == ("ak-1", "2023-06-01")
    assert msgspec.json.decode(create.content)["requests"][0]["custom_id"] == "line-3"
    assert (state.ended, read.method) == (True, "GET")
    assert str(fetch.url) == "https://api.anthropic.com/v1/messages/batches/msgbatch_1/results"
    assert [(result.line_no, result.status_code) for result in results] == [(3, 200)]


@pytest.mark.parametrize("serving", [OPENAI, CLAUDE])
async def test_a_refused_or_unreachable_call_is_a_provider_batch_error(serving: Provider) -> None:
    async with client(lambda request: httpx.Response(503), []) as http:
        with pytest.raises(ProviderBatchError, match="HTTP 503"):
            await batch_api_for(http, serving).cancel("b1")

    def unreachable(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("down")

    async with client(unreachable, []) as http:
        with pytest.raises(ProviderBatchError, match="ConnectError"):
            await batch_api_for(http, serving).state("b1")
