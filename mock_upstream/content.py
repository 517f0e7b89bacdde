"""Deterministic generated content: completion words, tool arguments, embedding vectors.

Everything here is a pure function of the request, so two mock processes (or two test runs)
answer the same request with the same text. Each generated word counts as one token.
"""

from __future__ import annotations

import hashlib
import math
import struct
from typing import Any

# fmt: off
VOCABULARY = (
    "alpha", "bravo", "cedar", "delta", "ember", "fjord", "glade", "harbor", "island", "jasper",
    "kettle", "lumen", "meadow", "nectar", "orbit", "pebble", "quartz", "river", "summit", "timber",
    "umber", "velvet", "willow", "xenon", "yonder", "zephyr", "amber", "basil", "canyon", "dune",
    "echo", "fable", "granite", "hollow", "iris", "juniper", "kernel", "lantern", "maple", "north",
    "ocean", "prism", "quill", "raven", "sable", "thistle", "upland", "vapor", "wander", "yarrow",
    "zenith", "acorn", "birch", "comet", "drift", "flint", "grove", "heron", "indigo", "lagoon",
    "marble", "opal",
)
# fmt: on


def text_tokens(text: str) -> int:
    """A token estimate that needs no tokenizer: one token per four bytes of UTF-8, rounded up."""
    return math.ceil(len(text.encode()) / 4)


def _digest_bytes(seed: bytes, count: int) -> bytes:
    """`count` bytes derived from `seed`."""
    blocks = (count + 63) // 64
    digest = b"".join(
        hashlib.blake2b(seed + block.to_bytes(8, "little"), digest_size=64).digest()
        for block in range(blocks)
    )
    return digest[:count]


def completion_words(seed_text: str, count: int, salt: str = "") -> list[str]:
    """`count` words chosen by a hash of `seed_text` (the last user message) and `salt`."""
    return [
        VOCABULARY[byte % len(VOCABULARY)] for byte in _digest_bytes(f"{salt}\x00{seed_text}".encode(), count)
    ]


def split_pieces(words: list[str], chunks: int) -> list[str]:
    """Cut `words` into at most `chunks` pieces whose concatenation is `" ".join(words)`."""
    if not words:
        return []
    chunks = min(chunks, len(words))
    size, extra = divmod(len(words), chunks)
    pieces: list[str] = []
    start = 0
    for index in range(chunks):
        end = start + size + (1 if index < extra else 0)
        piece = " ".join(words[start:end])
        pieces.append(piece if index == 0 else " " + piece)
        start = end
    return pieces


def tool_input(parameters: Any) -> dict[str, Any]:
    """Arguments that fill the required properties of a JSON-schema `parameters` object."""
    if not isinstance(parameters, dict):
        return {}
    properties = parameters.get("properties") or {}
    required = parameters.get("required") or []
    placeholder = {"string": "mock", "integer": 1, "number": 1.0, "boolean": True, "array": [], "object": {}}
    arguments: dict[str, Any] = {}
    for name in required:
        spec = properties.get(name) if isinstance(properties, dict) else None
        kind = spec.get("type") if isinstance(spec, dict) else None
        arguments[name] = placeholder.get(kind, "mock") if isinstance(kind, str) else "mock"
    return arguments


def embedding_vector(text: str, dimensions: int) -> list[float]:
    """A unit-length vector of `dimensions` floats derived from `text`."""
    raw = [(byte - 127.5) / 127.5 for byte in _digest_bytes(b"embedding\x00" + text.encode(), dimensions)]
    norm = math.sqrt(sum(value * value for value in raw)) or 1.0
    return [round(value / norm, 6) for value in raw]


def pack_float32(vector: list[float]) -> bytes:
    """The little-endian float32 bytes OpenAI base64-encodes for `encoding_format=base64`."""
    return struct.pack(f"<{len(vector)}f", *vector)
