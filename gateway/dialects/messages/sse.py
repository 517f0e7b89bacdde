"""Messages API stream frames: `event: <type>` and `data: <json>`, as the `anthropic` SDK reads them.

Each frame is whole: its `event:` line belongs to its own data, and nothing is left pending after
it. A failure after the first byte ends the stream with an `error` event holding Anthropic's error
envelope (`gateway.dialects.messages.errors.error_event`), which the SDKs raise.
"""

from __future__ import annotations

import msgspec

from gateway.schemas.anthropic import StreamEvent


def raw_frame(event_type: bytes, data: bytes) -> bytes:
    return b"event: " + event_type + b"\ndata: " + data + b"\n\n"


def event_frame(event: StreamEvent) -> bytes:
    tag = type(event).__struct_config__.tag
    assert isinstance(tag, str)
    return raw_frame(tag.encode(), msgspec.json.encode(event))
