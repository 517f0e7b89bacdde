"""The scenarios' input files and what a finished job's files hold: pure, no I/O.

A line's prompt is measured as the simulated vLLM measures it (mock_upstream.vllm.tokens:
each message rendered as `<|role|>text` and a newline, four characters a token, prefix-cache
blocks of `block_size` tokens over that text)."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.scheduling.load import Chat

CHAT_URL = "/v1/chat/completions"
CHARS_PER_TOKEN = 4  # mock_upstream.vllm.tokens


@dataclass(frozen=True, slots=True)
class Line:
    """One request of an input file."""

    custom_id: str
    chat: Chat
    group: str = ""  # the shared prompt prefix it belongs to, where the scenario shares one


def input_file(model: str, lines: Iterable[Line]) -> bytes:
    """The lines as a Batch API input file (JSONL, one request a line)."""
    rows = (
        {
            "custom_id": line.custom_id,
            "method": "POST",
            "url": CHAT_URL,
            "body": {"model": model, "messages": line.chat.messages, "max_tokens": line.chat.max_tokens},
        }
        for line in lines
    )
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


def rendered(chat: Chat) -> str:
    """The prompt's text as the simulator hashes and counts it."""
    return "".join(f"<|{m['role']}|>{m['content']}\n" for m in chat.messages)


def prompt_tokens(chat: Chat) -> int:
    return max(1, math.ceil(len(rendered(chat)) / CHARS_PER_TOKEN))


def _common_prefix(texts: Sequence[str]) -> int:
    """The length of the text every one of `texts` starts with."""
    shortest, longest = min(texts), max(texts)  # the two that differ soonest, in order
    size = 0
    while size < len(shortest) and shortest[size] == longest[size]:
        size += 1
    return size


@dataclass(frozen=True, slots=True)
class CacheCeiling:
    """The prefix-cache hits had each group's prefix been missed once only (its first line)."""

    hits: int  # tokens
    queries: int  # every line's prompt tokens, each looked up once

    @property
    def ratio(self) -> float:
        return self.hits / self.queries if self.queries else 0.0


def cache_ceiling(lines: Sequence[Line], block_size: int) -> CacheCeiling:
    """The best hit ratio: every line but the first of its group finds the full blocks of its group's
    common prefix. Lines of different groups share no full block (the scenarios open their prefixes
    differently within the first block). As the simulator does, a prompt's last token is always
    computed, so a wholly shared prompt still misses its last block."""
    groups: dict[str, list[str]] = {}
    for line in lines:
        groups.setdefault(line.group, []).append(rendered(line.chat))
    block_chars = block_size * CHARS_PER_TOKEN
    hits = queries = 0
    for texts in groups.values():
        shared_blocks = _common_prefix(texts) // block_chars if len(texts) > 1 else 0
        for index, text in enumerate(texts):
            tokens = max(1, math.ceil(len(text) / CHARS_PER_TOKEN))
            queries += tokens
            if index > 0:
                hits += min(shared_blocks, (tokens - 1) // block_size) * block_size
    return CacheCeiling(hits, queries)


@dataclass(slots=True)
class JobFiles:
    """What a finished job's output and error files hold, line by line."""

    custom_ids: Counter[str] = field(default_factory=Counter)  # over both files
    succeeded: int = 0
    failed: int = 0  # error-file lines
    error_codes: Counter[str] = field(default_factory=Counter)
    prompt_tokens: int = 0  # the usage the output lines' completions report
    completion_tokens: int = 0
    cached_tokens: int = 0

    def missing(self, expected: Iterable[str]) -> int:
        return sum(1 for custom_id in expected if custom_id not in self.custom_ids)

    @property
    def duplicates(self) -> int:
        """Lines beyond the first of each custom_id."""
        return sum(count - 1 for count in self.custom_ids.values() if count > 1)

    @property
    def lines(self) -> int:
        return self.succeeded + self.failed


def _jsonl(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(row) for row in data.splitlines() if row.strip()]


def read_job_files(output: bytes, errors: bytes) -> JobFiles:
    """Count the lines of both files by custom_id, and add up the usage of the output lines."""
    files = JobFiles()
    for row in _jsonl(output):
        files.custom_ids[row["custom_id"]] += 1
        files.succeeded += 1
        usage = row["response"]["body"].get("usage") or {}
        files.prompt_tokens += usage.get("prompt_tokens", 0)
        files.completion_tokens += usage.get("completion_tokens", 0)
        details = usage.get("prompt_tokens_details") or {}
        files.cached_tokens += details.get("cached_tokens", 0) or 0
    for row in _jsonl(errors):
        files.custom_ids[row["custom_id"]] += 1
        files.failed += 1
        error = row.get("error") or (row.get("response") or {}).get("body", {}).get("error") or {}
        files.error_codes[str(error.get("code") or error.get("type") or "unknown")] += 1
    return files
