"""Incremental Server-Sent Events decoding: bytes from the wire in, `data` payloads out."""

from __future__ import annotations


class SSEDecoder:
    """Splits a byte stream into events and returns each event's data (multi-line data joined)."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        buffer = self._buffer + chunk
        held = b""
        if buffer.endswith(b"\r"):  # maybe half of a CRLF split between chunks: wait for the rest
            buffer, held = buffer[:-1], b"\r"
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *events, rest = buffer.split(b"\n\n")
        self._buffer = rest + held
        payloads = []
        for event in events:
            data = _data_of(event)
            if data is not None:
                payloads.append(data)
        return payloads

    def close(self) -> list[bytes]:
        """The stream ended: a last event without its blank line still counts."""
        rest, self._buffer = self._buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n"), b""
        data = _data_of(rest) if rest.strip() else None
        return [data] if data is not None else []


def _data_of(event: bytes) -> bytes | None:
    if event.startswith(b"data: ") and b"\n" not in event:  # one line of data: nearly every event
        return event[6:]
    lines = [line for line in event.split(b"\n") if line.startswith(b"data:")]
    if not lines:
        return None
    parts = [line[6:] if line.startswith(b"data: ") else line[5:] for line in lines]
    return b"\n".join(parts)


def sse_frame(data: bytes) -> bytes:
    return b"data: " + data + b"\n\n"
