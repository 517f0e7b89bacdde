"""The providers' own batch APIs, faked: OpenAI's (and Azure's) files and batches, and Anthropic's
Message Batches.

A batch is answered line by line with the mock's ordinary chat or messages answer
(`answers.answer`, so prompt caching and a line body's `"mock"` overrides apply), once the
behaviour's `batch_delay_ms` has passed since it was created; it is run when it is first read after
that. Its lines are taken to finish evenly over that delay, so a cancel before its end ends it with
the lines finished by then answered (none, when cancelled at once) and the rest never run, as a
provider's cancelled batch keeps its finished requests. Everything is kept in memory.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

import msgspec

from mock_upstream import anthropic_format, openai_format
from mock_upstream.answers import answer
from mock_upstream.behaviour import BehaviourError, MockBehaviour, with_overrides
from mock_upstream.cache import PromptCache
from mock_upstream.recorder import BodyTooDeep, parse_body
from mock_upstream.replies import MockReply, json_reply
from mock_upstream.routes import Api, Operation, Route, request_problem

CHAT_URLS = ("/v1/chat/completions", "/chat/completions")  # OpenAI's, and Azure's
_ENCODER = msgspec.json.Encoder()


def _error(api: Api, status: int, message: str) -> MockReply:
    body = (
        anthropic_format.error_body(status, message)
        if api is Api.ANTHROPIC
        else openai_format.error_body(status, message)
    )
    return json_reply(status, body)


def _new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


def _rfc3339(at: float | None) -> str | None:
    return None if at is None else datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")


def _jsonl(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(_ENCODER.encode(line) + b"\n" for line in lines)


def multipart_fields(content_type: str, body: bytes) -> dict[str, tuple[str | None, bytes]]:
    """The fields of a multipart/form-data body: name -> (filename, bytes)."""
    message = BytesParser(policy=HTTP).parsebytes(
        b"content-type: " + content_type.encode() + b"\r\n\r\n" + body
    )
    fields: dict[str, tuple[str | None, bytes]] = {}
    for part in message.iter_parts() if message.is_multipart() else ():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if isinstance(name, str) and isinstance(payload, bytes):
            fields[name] = (part.get_filename(), payload)
    return fields


@dataclass(frozen=True, slots=True)
class LineAnswer:
    """One request of a batch as the mock answered it."""

    custom_id: str
    status: int
    body: bytes  # the answer (a completion, a message) or an error body, JSON


@dataclass
class FakeBatch:
    """A batch of either API: its requests until it runs, then their answers."""

    id: str
    api: Api
    requests: list[tuple[str, Any]]  # (custom_id, request body)
    created_at: float
    ready_at: float
    input_file_id: str | None = None
    endpoint: str = "/v1/chat/completions"
    cancelled_at: float | None = None
    ended_at: float | None = None
    answers: list[LineAnswer] = field(default_factory=list)
    output_file_id: str | None = None
    error_file_id: str | None = None


@dataclass
class MockBatches:
    """The files and batches one mock upstream holds."""

    files: dict[str, tuple[str, str, bytes]] = field(default_factory=dict)  # id -> purpose, filename, bytes
    batches: dict[str, FakeBatch] = field(default_factory=dict)

    def reply(
        self, route: Route, headers: dict[str, str], raw: bytes, behaviour: MockBehaviour, cache: PromptCache
    ) -> MockReply:
        operation, item = route.operation, route.item_id or ""
        if operation is Operation.FILE_UPLOAD:
            return self._upload(headers.get("content-type", ""), raw)
        if operation is Operation.FILE_CONTENT:
            return self._file_content(item)
        if operation is Operation.BATCH_CREATE:
            return self._create_openai(parse_body(raw), behaviour)
        if operation is Operation.MESSAGE_BATCH_CREATE:
            return self._create_anthropic(parse_body(raw), behaviour)
        batch = self.batches.get(item)
        if batch is None or batch.api is not route.api:
            return _error(route.api, 404, f"No batch with id '{item}'")
        cancel = operation in (Operation.BATCH_CANCEL, Operation.MESSAGE_BATCH_CANCEL)
        if cancel and batch.ended_at is None and batch.cancelled_at is None:
            batch.cancelled_at = time.time()
        self._settle(batch, behaviour, cache)
        if operation is Operation.MESSAGE_BATCH_RESULTS:
            return self._anthropic_results(batch)
        if route.api is Api.ANTHROPIC:
            return json_reply(200, _ENCODER.encode(self._anthropic_batch(batch, headers)))
        return json_reply(200, _ENCODER.encode(self._openai_batch(batch)))

    # --- files ------------------------------------------------------------------------------

    def _store(self, purpose: str, filename: str, data: bytes) -> dict[str, Any]:
        file_id = _new_id("file-")
        self.files[file_id] = (purpose, filename, data)
        return {"id": file_id, "object": "file", "bytes": len(data), "created_at": int(time.time()),
                "filename": filename, "purpose": purpose, "status": "processed"}  # fmt: skip

    def _upload(self, content_type: str, raw: bytes) -> MockReply:
        fields = multipart_fields(content_type, raw)
        if "file" not in fields or "purpose" not in fields:
            return _error(Api.OPENAI, 400, "a multipart body with 'file' and 'purpose' is required")
        filename, data = fields["file"]
        stored = self._store(fields["purpose"][1].decode(), filename or "upload.jsonl", data)
        return json_reply(200, _ENCODER.encode(stored))

    def _file_content(self, file_id: str) -> MockReply:
        stored = self.files.get(file_id)
        if stored is None:
            return _error(Api.OPENAI, 404, f"No such File object: {file_id}")
        return MockReply(200, [("content-type", "application/octet-stream")], stored[2])

    # --- creating ---------------------------------------------------------------------------

    def _add(self, api: Api, requests: list[tuple[str, Any]], behaviour: MockBehaviour) -> FakeBatch:
        now = time.time()
        batch_id = _new_id("batch_" if api is Api.OPENAI else "msgbatch_")
        batch = FakeBatch(batch_id, api, requests, now, now + behaviour.batch_delay_ms / 1000)
        self.batches[batch.id] = batch
        return batch

    def _create_openai(self, body: Any, behaviour: MockBehaviour) -> MockReply:
        if not isinstance(body, dict) or not isinstance(body.get("input_file_id"), str):
            return _error(Api.OPENAI, 400, "'input_file_id' is a required property")
        if body.get("endpoint") not in CHAT_URLS:
            return _error(Api.OPENAI, 400, "the mock runs batches of chat completions only")
        stored = self.files.get(body["input_file_id"])
        if stored is None:
            return _error(Api.OPENAI, 404, f"No such File object: {body['input_file_id']}")
        requests = []
        for number, text in enumerate(stored[2].decode("utf-8", "replace").splitlines()):
            try:
                line = parse_body(text.encode())
            except BodyTooDeep:
                line = None  # refused below, as a line that is not a chat request
            if isinstance(line, dict) and line.get("url") in CHAT_URLS:
                requests.append((str(line.get("custom_id")), line.get("body")))
            elif text.strip():
                return _error(Api.OPENAI, 400, f"line {number + 1} of the input file is not a chat request")
        batch = self._add(Api.OPENAI, requests, behaviour)
        batch.input_file_id, batch.endpoint = body["input_file_id"], body["endpoint"]
        return json_reply(200, _ENCODER.encode(self._openai_batch(batch)))

    def _create_anthropic(self, body: Any, behaviour: MockBehaviour) -> MockReply:
        requests = body.get("requests") if isinstance(body, dict) else None
        if not isinstance(requests, list) or not requests:
            return _error(Api.ANTHROPIC, 400, "requests: Field required")
        pairs = [(str(r.get("custom_id")), r.get("params")) for r in requests if isinstance(r, dict)]
        if len(pairs) != len(requests):
            return _error(Api.ANTHROPIC, 400, "requests: each request must be an object")
        batch = self._add(Api.ANTHROPIC, pairs, behaviour)
        return json_reply(200, _ENCODER.encode(self._anthropic_batch(batch, {})))

    # --- running ----------------------------------------------------------------------------

    def _settle(self, batch: FakeBatch, behaviour: MockBehaviour, cache: PromptCache) -> None:
        """End the batch if it is due: cancelled with nothing run, or answered line by line."""
        if batch.ended_at is not None:
            return
        now = time.time()
        if batch.cancelled_at is None and now < batch.ready_at:
            return
        finished = batch.requests
        if batch.cancelled_at is not None:
            finished = batch.requests[: _finished_by(batch, batch.cancelled_at)]
        batch.answers = [_answer_line(batch.api, cid, body, behaviour, cache) for cid, body in finished]
        batch.ended_at = now
        if batch.api is Api.OPENAI:
            self._write_files(batch)

    def _write_files(self, batch: FakeBatch) -> None:
        output: list[dict[str, Any]] = []
        errors: list[dict[str, Any]] = []
        for line in batch.answers:
            entry = {"id": _new_id("batch_req_"), "custom_id": line.custom_id, "error": None,
                     "response": {"status_code": line.status, "request_id": _new_id("req_"),
                                  "body": msgspec.Raw(line.body)}}  # fmt: skip
            (output if line.status == 200 else errors).append(entry)
        batch.output_file_id = self._store("batch_output", f"{batch.id}_output.jsonl", _jsonl(output))["id"]
        if errors:
            batch.error_file_id = self._store("batch_errors", f"{batch.id}_error.jsonl", _jsonl(errors))["id"]

    # --- reading ----------------------------------------------------------------------------

    def _openai_batch(self, batch: FakeBatch) -> dict[str, Any]:
        ended, cancelled = batch.ended_at, batch.cancelled_at
        status = "in_progress" if ended is None else "cancelled" if cancelled is not None else "completed"
        if ended is None and cancelled is not None:
            status = "cancelling"
        failed = sum(1 for line in batch.answers if line.status != 200)
        stamp = int(ended) if ended is not None else None
        return {
            "id": batch.id, "object": "batch", "endpoint": batch.endpoint, "errors": None,
            "input_file_id": batch.input_file_id, "completion_window": "24h", "status": status,
            "output_file_id": batch.output_file_id, "error_file_id": batch.error_file_id,
            "created_at": int(batch.created_at), "in_progress_at": int(batch.created_at),
            "expires_at": int(batch.created_at) + 86_400, "finalizing_at": stamp if cancelled is None else None,
            "completed_at": stamp if cancelled is None else None, "failed_at": None, "expired_at": None,
            "cancelling_at": int(cancelled) if cancelled is not None else None,
            "cancelled_at": stamp if cancelled is not None else None,
            "request_counts": {"total": len(batch.requests), "completed": len(batch.answers) - failed,
                               "failed": failed},
            "metadata": None,
        }  # fmt: skip

    def _anthropic_batch(self, batch: FakeBatch, headers: dict[str, str]) -> dict[str, Any]:
        ended = batch.ended_at is not None
        status = "ended" if ended else "canceling" if batch.cancelled_at is not None else "in_progress"
        succeeded = sum(1 for line in batch.answers if line.status == 200)
        unrun = len(batch.requests) - len(batch.answers)
        # `x-mock-results-base` (a provider's configured header) names another server for the
        # results, with a signed-looking query: what a gateway must not follow with its key.
        base, query = headers.get("x-mock-results-base"), "?signature=mock-signature"
        if base is None:
            host = headers.get("host")
            base, query = (f"http://{host}" if host else None), ""
        results_url = f"{base}/v1/messages/batches/{batch.id}/results{query}" if ended and base else None
        return {
            "id": batch.id, "type": "message_batch", "processing_status": status,
            "request_counts": {"processing": 0 if ended else len(batch.requests), "succeeded": succeeded,
                               "errored": len(batch.answers) - succeeded, "canceled": unrun if ended else 0,
                               "expired": 0},
            "ended_at": _rfc3339(batch.ended_at), "created_at": _rfc3339(batch.created_at),
            "expires_at": _rfc3339(batch.created_at + 86_400), "archived_at": None,
            "cancel_initiated_at": _rfc3339(batch.cancelled_at), "results_url": results_url,
        }  # fmt: skip

    def _anthropic_results(self, batch: FakeBatch) -> MockReply:
        if batch.ended_at is None:
            return _error(Api.ANTHROPIC, 400, f"Batch {batch.id} is still processing")
        answered = {line.custom_id: line for line in batch.answers}
        lines = [_anthropic_result(custom_id, answered.get(custom_id)) for custom_id, _ in batch.requests]
        return MockReply(200, [("content-type", "application/binary")], _jsonl(lines))


def _finished_by(batch: FakeBatch, at: float) -> int:
    """How many of the batch's lines (the first ones) had finished at `at`: they finish one after
    another, evenly spread over its delay."""
    delay = batch.ready_at - batch.created_at
    if delay <= 0 or at >= batch.ready_at:
        return len(batch.requests)
    return int(len(batch.requests) * max(at - batch.created_at, 0.0) / delay)


def _anthropic_result(custom_id: str, line: LineAnswer | None) -> dict[str, Any]:
    if line is None:
        return {"custom_id": custom_id, "result": {"type": "canceled"}}
    if line.status == 200:
        return {"custom_id": custom_id, "result": {"type": "succeeded", "message": msgspec.Raw(line.body)}}
    return {"custom_id": custom_id, "result": {"type": "errored", "error": msgspec.Raw(line.body)}}


def _answer_line(
    api: Api, custom_id: str, body: Any, behaviour: MockBehaviour, cache: PromptCache
) -> LineAnswer:
    """One request of a batch, answered as the endpoint itself would; a body's `"mock"` object
    changes the behaviour for that line alone (`fail_rate: 1` with a `fail_status` fails it)."""
    route = Route(api, Operation.MESSAGES if api is Api.ANTHROPIC else Operation.CHAT)
    try:
        line_behaviour = with_overrides(behaviour, body.get("mock") if isinstance(body, dict) else None)
    except BehaviourError as exc:
        return LineAnswer(custom_id, 400, _error(api, 400, str(exc)).body)
    if line_behaviour.fail_rate >= 1:
        status = line_behaviour.fail_status
        return LineAnswer(
            custom_id, status, _error(api, status, f"mock upstream failure (status {status})").body
        )
    problem = request_problem(route, body)
    if problem is None and body.get("stream") is True:
        problem = "a request of a batch cannot stream"
    if problem is not None:
        return LineAnswer(custom_id, 400, _error(api, 400, problem).body)
    reply = answer(cache, route, body, line_behaviour)
    return LineAnswer(custom_id, reply.status, reply.body)
