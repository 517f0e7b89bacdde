"""What a slot holds: the claim of the request running for it, or its stored answer.

Both carry the request's fingerprint, so a repeat with another body is told apart from the first
whichever of the two it finds. Stored answers hold prompt-derived text: they are never logged.
"""

from __future__ import annotations

import msgspec


class Claim(msgspec.Struct, frozen=True, tag="claim"):
    """The first request of a key, running: waiters wait for it while its lease lasts."""

    fingerprint: str
    owner: str  # the running request's id: only it may store the answer or release the slot


class StoredAnswer(msgspec.Struct, frozen=True, tag="answer"):
    """The first request's answer, as it went to its client: a JSON body or a stream's frames."""

    fingerprint: str
    status: int
    headers: dict[str, str]
    body: bytes = b""
    frames: list[bytes] | None = None  # a stream's chunks in the order they were sent

    def size(self) -> int:
        frames = sum(len(frame) for frame in self.frames) if self.frames is not None else 0
        return len(self.body) + frames + sum(len(k) + len(v) for k, v in self.headers.items())


Record = Claim | StoredAnswer

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Record)


def encode_record(record: Record) -> bytes:
    return _encoder.encode(record)


def decode_record(raw: bytes) -> Record:
    return _decoder.decode(raw)
