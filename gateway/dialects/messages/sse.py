"""Messages API stream frames: `event: <type>` and `data: <json>`, as the `anthropic` SDK reads them.

The SDK acts only on named events. The gateway reports a failure after the first byte in-band as a
bare `data:` frame holding its error object (SPEC section 2, `gateway.proxy.relay`), which the SDK
would skip, ending the stream as if it were whole. So every frame but the last leaves an
`event: error` line pending behind it: the next frame's own `event:` line replaces it (the last
event line before the data wins, per the SSE format), while the gateway's error frame inherits it
and reaches the client as an `error` event, which the SDK raises. After message_stop nothing
is pending: the stream ends clean.
"""

from __future__ import annotations

import msgspec

from gateway.schemas.anthropic import StreamEvent

_PENDING_ERROR = b"event: error\n"


def raw_frame(event_type: bytes, data: bytes, *, last: bool = False) -> bytes:
    frame = b"event: " + event_type + b"\ndata: " + data + b"\n\n"
    return frame if last else frame + _PENDING_ERROR


def event_frame(event: StreamEvent) -> bytes:
    tag = type(event).__struct_config__.tag
    assert isinstance(tag, str)
    return raw_frame(tag.encode(), msgspec.json.encode(event))


def final_frame(event: StreamEvent) -> bytes:
    """The stream's last frame (message_stop), with nothing pending after it."""
    tag = type(event).__struct_config__.tag
    assert isinstance(tag, str)
    return raw_frame(tag.encode(), msgspec.json.encode(event), last=True)
