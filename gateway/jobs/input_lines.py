"""A batch's input file, checked line by line as OpenAI checks it before a batch may start.

Each line is a JSON object `{"custom_id", "method": "POST", "url": <the batch's endpoint>, "body"}`
whose body names the model; one model for the whole file, each custom_id once, at most
`MAX_REQUESTS` requests, no body nesting past `MAX_NESTING` and no routing directives of its own.
What is wrong is reported per line (1-based, as OpenAI counts), up to `MAX_LISTED_ERRORS`. Blank
lines are skipped, but still counted in line numbers.

The file is read once, chunk by chunk (`InputCheck.feed`): each chunk's good lines come back for
the caller to store, and only what later lines are checked against (the custom_ids seen, the
model) is kept, never the file or a list of its decoded lines.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeGuard

import msgspec

from gateway.schemas.nesting import MAX_NESTING, too_deep

MAX_REQUESTS = 50_000  # OpenAI's limit per batch
MAX_LISTED_ERRORS = 100
MAX_CUSTOM_ID = 512  # BatchLine.custom_id's column
MAX_MODEL = 200  # BatchJob.model's column
CHECK_CHUNK_BYTES = 1024 * 1024  # how much of a file `check_input` hands the check at a time
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


@dataclass(frozen=True, slots=True)
class InputVerdict:
    """What a whole file came to once every chunk was fed: its request count and model, or the
    errors that fail the batch (then the lines handed out so far are not to be kept)."""

    requests: int
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


class InputCheck:
    """One pass over an input file for a batch to `endpoint`: `feed` its chunks in order, then
    `verdict`. Once a line is wrong, `feed` hands out no more lines (the batch will fail)."""

    def __init__(self, endpoint: str) -> None:
        self._endpoint = endpoint
        self._partial = bytearray()  # the start of a line the next chunk ends
        self._number = 0  # lines seen, blank ones too
        self._requests = 0
        self._seen: set[str] = set()
        self._model: str | None = None
        self._errors: list[LineError] = []

    def feed(self, chunk: bytes) -> list[InputLine]:
        """The good lines this chunk completes, in order."""
        good: list[InputLine] = []
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            if self._partial:
                self._partial += chunk[start:end]
                self._line(self._partial, good)
                self._partial = bytearray()
            else:
                self._line(chunk[start:end], good)
            start = end + 1
        self._partial += chunk[start:]
        return good

    def verdict(self) -> tuple[list[InputLine], InputVerdict]:
        """The last line (one without a final newline), and what the whole file came to."""
        good: list[InputLine] = []
        if self._partial:
            self._line(self._partial, good)
            self._partial = bytearray()
        if self._requests == 0:
            return [], InputVerdict(
                0, None, (LineError("empty_file", "The input file is empty: it holds no requests."),)
            )
        if self._requests > MAX_REQUESTS:
            too_many = LineError(
                "too_many_requests",
                f"The input file holds {self._requests} requests; a batch may hold at most {MAX_REQUESTS}.",
            )
            return [], InputVerdict(self._requests, self._model, (too_many,))
        return good, InputVerdict(self._requests, self._model, tuple(self._errors))

    @property
    def failing(self) -> bool:
        """Whether the file already cannot make a batch."""
        return bool(self._errors) or self._requests > MAX_REQUESTS

    def _line(self, line: bytes | bytearray, good: list[InputLine]) -> None:
        """Check one line (a line that spans chunks is checked in the buffer that gathered it)."""
        self._number += 1
        if not line or line.isspace():
            return
        self._requests += 1
        if self._requests > MAX_REQUESTS or len(self._errors) >= MAX_LISTED_ERRORS:
            return  # the file fails; what is left is only counted
        try:
            request = self._checked(line)
        except _Refused as refused:
            self._errors.append(_at_line(refused.error, self._number))
            return
        self._seen.add(request.custom_id)
        self._model = self._model or request.model
        if not self.failing:
            body = msgspec.json.encode(request.body).decode()
            good.append(InputLine(request.custom_id, body, prefix_key(request.body)))

    def _checked(self, line: bytes | bytearray) -> _Request:
        request = _read_line(line, self._endpoint)
        if request.custom_id in self._seen:
            raise _Refused(
                "duplicate_custom_id",
                f"The custom_id {request.custom_id!r} is used by an earlier line; each must be unique.",
                "custom_id",
            )
        if self._model is not None and request.model != self._model:
            raise _Refused(
                "mismatched_model",
                f"This line's model {request.model!r} differs from the file's model {self._model!r}; "
                "a batch holds requests for one model.",
                "body.model",
            )
        return request


def check_input(data: bytes, endpoint: str) -> CheckedInput:
    """Check a whole input file held in memory (the chunked check, over `data`)."""
    check = InputCheck(endpoint)
    lines = [line for chunk in _chunks(data) for line in check.feed(chunk)]
    last, verdict = check.verdict()
    if verdict.errors:
        return CheckedInput((), verdict.model, verdict.errors)
    return CheckedInput(tuple(lines + last), verdict.model, ())


def _chunks(data: bytes) -> Iterable[bytes]:
    for start in range(0, len(data), CHECK_CHUNK_BYTES):
        yield data[start : start + CHECK_CHUNK_BYTES]


def _at_line(error: LineError, number: int) -> LineError:
    return LineError(error.code, error.message, error.param, number)


def _read_line(line: bytes | bytearray, endpoint: str) -> _Request:
    try:
        request = msgspec.json.decode(line)
    except msgspec.DecodeError:
        raise _Refused(
            "invalid_json_line", "This line is not valid JSON (one JSON object per line)."
        ) from None
    except RecursionError:  # msgspec's own depth limit, far past MAX_NESTING
        raise _too_deep() from None
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
    if too_deep(body, raw=line if isinstance(line, bytes) else None):
        raise _too_deep()
    model = body.get("model")
    if not _is_name(model, MAX_MODEL):
        raise _Refused("invalid_request", "body.model must name the model.", "body.model")
    if body.get("stream") is True:  # a line's answer is one JSON body in the output file
        raise _Refused("invalid_request", "body.stream is not supported in a batch.", "body.stream")
    if "gateway" in body:  # a job is one batch, pinned once: its lines cannot each steer it
        raise _Refused(
            "invalid_request",
            "body.gateway: routing directives do not apply to one line of a batch. Give them for the "
            "whole batch on the create request: the X-Gateway-Region and X-Gateway-Provider headers, "
            "or the metadata keys gateway_region and gateway_provider.",
            "body.gateway",
        )
    return _Request(custom_id, model, body)


def _too_deep() -> _Refused:
    return _Refused(
        "invalid_request",
        f"body nests deeper than {MAX_NESTING} levels of arrays and objects, the gateway's bound.",
        "body",
    )


def _is_name(value: object, longest: int) -> TypeGuard[str]:
    return isinstance(value, str) and 1 <= len(value) <= longest and not _CONTROL.search(value)


def prefix_key(body: dict[str, Any]) -> str:
    """A 32-hex digest of what a request shares with its neighbours: the messages before its last
    user message, its system prompt (a Messages request's), and its tools. Lines with the same
    system prompt (and tools) get the same key, so they can run together while the server's prefix
    cache holds that prefix."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        messages = []
    users = [
        i for i, message in enumerate(messages) if isinstance(message, dict) and message.get("role") == "user"
    ]
    shared = {"messages": messages[: users[-1]] if users else messages, "tools": body.get("tools")}
    if "system" in body:  # a Messages request's system prompt stands apart from its messages
        shared["system"] = body["system"]
    return hashlib.blake2b(msgspec.json.encode(shared, order="sorted"), digest_size=16).hexdigest()
