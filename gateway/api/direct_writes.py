"""Responses written straight to uvicorn's transport, past its interpreted ASGI `send`.

uvicorn's `send` runs per ASGI message: for a whole response twice (`http.response.start`, then
`http.response.body`), with two regular-expression searches per header, a header loop, a held
head joined with the body and the response's bookkeeping; counted with callgrind that was ~60,000
instructions a request, about 8% of the worker's (docs/performance.md). When `gateway serve`'s
protocol (`gateway.http_server`) offers the request's cycle (a weak reference to it) under
`DIRECT_WRITES` in the ASGI scope's extensions:

- `send_whole` answers a non-streaming request in one call: the bytes uvicorn would write (its
  `date` header, the app's headers, `content-length`, `connection: close` when the connection
  ends), the same checks on header names and values, the same bookkeeping after the write (where
  writing is paused, uvicorn would first wait for the client to read; the transport buffers the
  response instead, one at most per connection, as uvicorn reads no further request meanwhile);
- `send_chunk` writes one frame of a stream that uvicorn's `send` started, in the chunked framing
  uvicorn would use, unless writing is paused (uvicorn's `send` then waits for the client to
  read) or the client is gone; the stream's start and end still go through `send`.

Anywhere else (granian, tests driving the ASGI app directly) the front uses `send` throughout.
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.http.httptools_impl import HEADER_RE, HEADER_VALUE_RE, STATUS_LINE

DIRECT_WRITES = "gateway.direct_writes"  # the scope extension: a weakref to uvicorn's RequestResponseCycle


def send_whole(cycle: Any, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    """Write `status`, `headers` (lowercase names, no content-length) and `body` on `cycle`.

    Raises RuntimeError, as uvicorn's `send` does, for a header name or value that could split the
    response, or a response already started."""
    if cycle.disconnected:
        return
    if cycle.response_started:
        raise RuntimeError("The response has already started")
    every: list[tuple[bytes, bytes]] = cycle.default_headers + headers
    parts = [STATUS_LINE[status]]
    names: list[bytes] = []
    values: list[bytes] = []
    for header in every:
        name, value = header[0], header[1]
        names.append(name)
        values.append(value)
        parts.append(name)
        parts.append(b": ")
        parts.append(value)
        parts.append(b"\r\n")
    # One search over all names and one over all values: joining adds no character to either.
    if HEADER_RE.search(b"".join(names)):
        raise RuntimeError("Invalid HTTP header name.")
    if HEADER_VALUE_RE.search(b"".join(values)):
        raise RuntimeError("Invalid HTTP header value.")
    keep_alive: bool = cycle.keep_alive
    parts.append(b"content-length: %d\r\n" % len(body))
    if not keep_alive:
        parts.append(b"connection: close\r\n")
    parts += (b"\r\n", body)
    cycle.response_started = True
    cycle.waiting_for_100_continue = False
    cycle.transport.write_now(b"".join(parts))
    cycle.response_complete = True
    cycle.message_event.set()
    if not keep_alive:
        cycle.transport.close()
    cycle.on_response()


def send_chunk(cycle: Any, data: bytes) -> bool:
    """Write one frame of a chunked response on `cycle`; False when uvicorn's `send` must do it."""
    if cycle.flow.write_paused or cycle.disconnected or cycle.response_complete or not cycle.chunked_encoding:
        return False
    if data:
        cycle.transport.write_now(b"%x\r\n%b\r\n" % (len(data), data))
    return True
