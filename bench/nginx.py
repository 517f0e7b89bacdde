"""The static upstream: nginx on a free loopback port serving canned OpenAI responses.

Locations (each under its own prefix, so a provider's `base_url` picks the behaviour):

- `/json/v1/chat/completions`: a non-streaming chat completion, a static file.
- `/sse/v1/chat/completions`: a whole SSE stream (usage included), a static file served as
  `text/event-stream`.
- `/slow/v1/chat/completions`: the same JSON after 50 ms (the echo module's `echo_sleep`, a timer:
  nginx itself stays idle while it waits).
- `/drip/v1/chat/completions`: an SSE stream whose chunks are flushed `drip_ms` apart (a model
  generating tokens), for time-to-first-token.
- `/hold/v1/chat/completions`: the same with `hold_ms` between chunks, to hold many streams open.

nginx answers POST on a static file with 405; `error_page 405 =200 $uri` turns that into a GET of
the same file, which is the usual way to serve canned bodies to POST clients.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import msgspec

ECHO_MODULE = Path("/usr/lib/nginx/modules/ngx_http_echo_module.so")
CHUNKS = 8  # content chunks in a canned stream

COMPLETION = {
    "id": "chatcmpl-bench",
    "object": "chat.completion",
    "created": 1764400000,
    "model": "bench-upstream",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "The quick brown fox jumps over the lazy dog."},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 24, "completion_tokens": 12, "total_tokens": 36},
}


def _chunk(delta: dict[str, str], finish: str | None = None, usage: bool = False) -> bytes:
    body: dict[str, object] = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1764400000,
        "model": "bench-upstream",
        "choices": [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage:
        body["usage"] = COMPLETION["usage"]
    return msgspec.json.encode(body)


def sse_frames() -> list[bytes]:
    """The `data:` payloads of the canned stream: role, content pieces, stop, usage."""
    words = ["The", " quick", " brown", " fox", " jumps", " over", " the", " lazy dog."]
    frames = [_chunk({"role": "assistant", "content": ""})]
    frames += [_chunk({"content": w}) for w in words[:CHUNKS]]
    frames += [_chunk({}, finish="stop"), _chunk({}, usage=True), b"[DONE]"]
    return frames


def sse_body() -> bytes:
    return b"".join(b"data: " + frame + b"\n\n" for frame in sse_frames())


def _drip_directives(drip_ms: int) -> str:
    """echo directives sending one frame, flushing, then sleeping: a slowly generating model."""
    lines = []
    for frame in sse_frames():
        text = (b"data: " + frame).decode().replace("\\", "\\\\").replace("'", "\\'")
        lines.append(f"echo '{text}\\n';")  # echo adds the second newline
        lines.append("echo_flush;")
        lines.append(f"echo_sleep {drip_ms / 1000:.3f};")
    return "\n            ".join(lines[:-1])


def render_config(root: Path, port: int, latency_ms: int, drip_ms: int, hold_ms: int) -> str:
    temp = root / "tmp"
    return f"""
load_module {ECHO_MODULE};
worker_processes 1;
daemon off;
pid {root}/nginx.pid;
error_log {root}/error.log warn;
user root root;  # the bench's files live in a private temporary folder
events {{ worker_connections 8192; }}
http {{
    access_log off;
    client_body_temp_path {temp}/body;
    proxy_temp_path {temp}/proxy;
    fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi;
    scgi_temp_path {temp}/scgi;
    keepalive_requests 10000000;
    keepalive_timeout 120s;
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        root {root}/www;
        error_page 405 =200 $uri;
        location = /json/v1/chat/completions {{ types {{ }} default_type application/json; }}
        location = /sse/v1/chat/completions {{ types {{ }} default_type text/event-stream; }}
        location = /slow/v1/chat/completions {{
            default_type application/json;
            echo_sleep {latency_ms / 1000:.3f};
            echo_location /json/v1/chat/completions;
        }}
        location = /drip/v1/chat/completions {{
            default_type text/event-stream;
            {_drip_directives(drip_ms)}
        }}
        location = /hold/v1/chat/completions {{
            default_type text/event-stream;
            {_drip_directives(hold_ms)}
        }}
    }}
}}
"""


@dataclass
class Nginx:
    root: Path
    port: int
    latency_ms: int = 50
    drip_ms: int = 20
    hold_ms: int = 1000
    process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, flavour: str) -> str:
        """The chat-completions URL of one flavour: json, sse, slow, drip or hold."""
        return f"{self.base_url}/{flavour}/v1/chat/completions"

    def start(self, cpus: str | None) -> Nginx:
        www = self.root / "www"
        for flavour, body in (("json", msgspec.json.encode(COMPLETION)), ("sse", sse_body())):
            target = www / flavour / "v1" / "chat" / "completions"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(body)
        (self.root / "tmp").mkdir(exist_ok=True)
        conf = self.root / "nginx.conf"
        conf.write_text(render_config(self.root, self.port, self.latency_ms, self.drip_ms, self.hold_ms))
        command = ["nginx", "-c", str(conf), "-p", str(self.root)]
        if cpus:
            command = ["taskset", "-c", cpus, *command]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)  # noqa: S603
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"nginx exited: {(self.root / 'error.log').read_text()}")
            try:
                if httpx.post(self.url("json"), content=b"{}", timeout=0.5).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.05)
        raise RuntimeError("nginx did not start")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
