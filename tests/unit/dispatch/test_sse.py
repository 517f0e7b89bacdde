"""The incremental SSE decoder: events split anywhere across chunks still decode to the same data."""

from __future__ import annotations

import pytest

from gateway.dispatch.sse import SSEDecoder, sse_frame

STREAM = (
    b'data: {"id":"1"}\n\n'
    b"event: message_start\ndata: first line\ndata: second line\n\n"
    b": a comment, ignored\n\n"
    b"id: 7\nretry: 100\ndata:no space\n\n"
    b"data: [DONE]\n\n"
)
EXPECTED = [b'{"id":"1"}', b"first line\nsecond line", b"no space", b"[DONE]"]


def decode(chunks: list[bytes]) -> list[bytes]:
    decoder = SSEDecoder()
    payloads = [data for chunk in chunks for data in decoder.feed(chunk)]
    return payloads + decoder.close()


def test_whole_stream_in_one_chunk() -> None:
    assert decode([STREAM]) == EXPECTED


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 16])
def test_any_chunking_gives_the_same_events(size: int) -> None:
    chunks = [STREAM[i : i + size] for i in range(0, len(STREAM), size)]
    assert decode(chunks) == EXPECTED


def test_crlf_and_cr_line_endings() -> None:
    crlf = STREAM.replace(b"\n", b"\r\n")
    cr = STREAM.replace(b"\n", b"\r")
    assert decode([crlf]) == EXPECTED
    assert decode([cr]) == EXPECTED


def test_crlf_split_between_chunks_is_one_line_ending() -> None:
    assert decode([b"data: a\r", b"\ndata: b\r\n\r\n"]) == [b"a\nb"]


def test_event_is_only_returned_once_its_blank_line_arrives() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: partial") == []
    assert decoder.feed(b" still\n") == []
    assert decoder.feed(b"\n") == [b"partial still"]


def test_close_returns_a_last_event_without_its_blank_line() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: one\n\ndata: tail") == [b"one"]
    assert decoder.close() == [b"tail"]
    assert decoder.close() == []


def test_close_ignores_trailing_whitespace_and_events_without_data() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"data: x\n\n\n")
    assert decoder.close() == []
    decoder.feed(b"event: ping\n")
    assert decoder.close() == []


def test_empty_data_field_is_an_empty_payload() -> None:
    assert decode([b"data:\n\ndata: \n\n"]) == [b"", b""]


def test_sse_frame_round_trips_through_the_decoder() -> None:
    frame = sse_frame(b'{"a":1}')
    assert frame == b'data: {"a":1}\n\n'
    assert decode([frame]) == [b'{"a":1}']
