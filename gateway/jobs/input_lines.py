"""A batch's input file, checked line by line as OpenAI checks it before a batch may start.

Each line is a JSON object `{"custom_id", "method": "POST", "url": <the batch's endpoint>, "body"}`
whose body names the model; one model for the whole file, each custom_id once, at most
`MAX_REQUESTS` requests. What is wrong is reported per line (1-based, as OpenAI counts), up to
`MAX_LISTED_ERRORS`. Blank lines are skipped, but still counted in line numbers.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, TypeGuard

import msgspec

MAX_REQUESTS = 50_000  # OpenAI's limit per batch
MAX_LISTED_ERRORS = 100
MAX_CUSTOM_ID = 512  # BatchLine.custom_id's column
MAX_MODEL = 200  # BatchJob.model's column
# custom_id and the model are stored as text, which in PostgreSQL cannot hold NUL; no other control
# character belongs in an id or a model name either. (A lone surrogate is already invalid JSON.)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class InputLine:
    custom_id: str
    body: str  # the request body re-encoded as JSON text
    prefix_key: str  # shared by lines whose prompts start the same (see prefix_key)


@dataclass(frozen=True, slots=True)
class LineError:
    """One item of OpenAI's `errors.data`."""

    code: str
    message: str
    param: str | None = None
    line: int | None = None


@dataclass(frozen=True, slots=True)
class CheckedInput:
    """The lines of a good file, or what is wrong with a bad one (then `lines` is empty)."""

    lines: tuple[InputLine, ...]
    model: str | None
    errors: tuple[LineError, ...]


class _Refused(Exception):
    def __init__(self, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.error = LineError(code, message, param)


@dataclass(frozen=True, slots=True)
class _Request:
    custom_id: str
    model: str
    body: dict[str, Any]


def check_input(data: bytes, endpoint: str) -> CheckedInput:
    """Check a whole input file for a batch to `endpoint`."""
    numbered = [(number, line) for number, line in enumerate(data.split(b"\n"), start=1) if line.strip()]
    if not numbered:
        return _failed(LineError("empty_file", "The input file is empty: it holds no requests."))
    if len(numbered) > MAX_REQUESTS:
        return _failed(
            LineError(
                "too_many_requests",
                f"The input file holds {len(numbered)} requests; a batch may hold at most {MAX_REQUESTS}.",
            )
        )
    requests: list[_Request] = []
    errors: list[LineError] = []
    seen: set[str] = set()
    model: str | None = None
    for number, line in numbered:
        if len(errors) >= MAX_LISTED_ERRORS:
            break
        try:
            request = _read_line(line, endpoint)
            if request.custom_id in seen:
                raise _Refused(
                    "duplicate_custom_id",
                    f"The custom_id {request.custom_id!r} is used by an earlier line; each must be unique.",
                    "custom_id",
                )
            if model is not None and request.model != model:
                raise _Refused(
                    "mismatched_model",
                    f"This line's model {request.model!r} differs from the file's model {model!r}; "
                    "a batch holds requests for one model.",
                    "body.model",
                )
        except _Refused as refused:
            errors.append(_at_line(refused.error, number))
            continue
        seen.add(request.custom_id)
        model = model or request.model
        requests.append(request)
    if errors:
        return CheckedInput((), model, tuple(errors))
    lines = tuple(
        InputLine(r.custom_id, msgspec.json.encode(r.body).decode(), prefix_key(r.body)) for r in requests
    )
    return CheckedInput(lines, model, ())


def _failed(error: LineError) -> CheckedInput:
    return CheckedInput((), None, (error,))


def _at_line(error: LineError, number: int) -> LineError:
    return LineError(error.code, error.message, error.param, number)


def _read_line(line: bytes, endpoint: str) -> _Request:
    try:
        request = msgspec.json.decode(line)
    except msgspec.DecodeError:
        raise _Refused(
            "invalid_json_line", "This line is not valid JSON (one JSON object per line)."
        ) from None
    if not isinstance(request, dict):
        raise _Refused("invalid_json_line", "This line is not a JSON object.")
    custom_id = request.get("custom_id")
    if not _is_name(custom_id, MAX_CUSTOM_ID):
        raise _Refused(
            "invalid_request",
            f"custom_id must be a string of 1 to {MAX_CUSTOM_ID} characters, none of them control characters.",
            "custom_id",
        )
    if request.get("method") != "POST":
        raise _Refused("invalid_request", "method must be POST.", "method")
    if request.get("url") != endpoint:
        raise _Refused(
            "mismatched_endpoint", f"url must be the batch's endpoint, {endpoint}, on every line.", "url"
        )
    body = request.get("body")
    if not isinstance(body, dict):
        raise _Refused("invalid_request", "body must be a JSON object: the request to send.", "body")
    model = body.get("model")
    if not _is_name(model, MAX_MODEL):
        raise _Refused("invalid_request", "body.model must name the model.", "body.model")
    if body.get("stream") is True:  # a line's answer is one JSON body in the output file
        raise _Refused("invalid_request", "body.stream is not supported in a batch.", "body.stream")
    return _Request(custom_id, model, body)


def _is_name(value: object, longest: int) -> TypeGuard[str]:
    return isinstance(value, str) and 1 <= len(value) <= longest and not _CONTROL.search(value)


def prefix_key(body: dict[str, Any]) -> str:
    """A 32-hex digest of what a request shares with its neighbours: the messages before its last
    user message, and its tools. Lines with the same system prompt (and tools) get the same key,
    so they can run together while the server's prefix cache holds that prefix."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        messages = []
    users = [
        i for i, message in enumerate(messages) if isinstance(message, dict) and message.get("role") == "user"
    ]
    shared = {"messages": messages[: users[-1]] if users else messages, "tools": body.get("tools")}
    return hashlib.blake2b(msgspec.json.encode(shared, order="sorted"), digest_size=16).hexdigest()
