"""An OpenAI-compatible upstream that reports whatever usage the request asks it to: a misbehaving
provider for tests (negative, absurd or missing counts).

The gateway forwards body fields it does not know, so a request carrying
`"scripted_usage": {"prompt_tokens": -5}` gets a completion whose `usage` is exactly that;
without the field the usage is `DEFAULT_USAGE`. Served by the standard library's threading HTTP
server on a free port, in a thread of the test process.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

DEFAULT_USAGE = {"prompt_tokens": 10, "completion_tokens": 8, "total_tokens": 18}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))) or b"{}")
        usage = body.get("scripted_usage", DEFAULT_USAGE)
        reply = {
            "id": "chatcmpl-scripted",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "scripted"),
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
            ],
        }
        if usage is not None:
            reply["usage"] = usage
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # no line per request on stderr
        return


class ScriptedUpstream:
    """`with ScriptedUpstream() as upstream:` serves on `upstream.base_url` until the block ends."""

    def __init__(self) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> ScriptedUpstream:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
