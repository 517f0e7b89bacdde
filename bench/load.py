"""wrk as the load generator: a Lua script per target (POST, body, headers) and its summary as JSON."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import msgspec

# wrk calls done() once at the end; printing JSON avoids parsing its human-readable report.
_DONE = """
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests": %d, "duration_us": %d, "p50_us": %d, "p90_us": %d, "p99_us": %d, ' ..
    '"errors": %d, "non_2xx": %d}\\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), e.connect + e.read + e.write + e.timeout, e.status))
end
"""


def chat_body(model: str, stream: bool) -> bytes:
    """A small chat request, the shape a batch job sends."""
    body: dict[str, object] = {
        "model": model,
        "messages": [
            {"role": "system", "content": "You are a concise assistant."},
            {"role": "user", "content": "Summarise the plot of Hamlet in one sentence."},
        ],
        "max_tokens": 64,
    }
    if stream:
        body["stream"] = True
    return msgspec.json.encode(body)


def lua_script(path: str, body: bytes, headers: dict[str, str]) -> str:
    lines = [
        'wrk.method = "POST"',
        f"wrk.path = {json.dumps(path)}",
        f"wrk.body = [==[{body.decode()}]==]",
        'wrk.headers["Content-Type"] = "application/json"',
    ]
    lines += [f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in headers.items()]
    return "\n".join(lines) + "\n" + _DONE


@dataclass(frozen=True)
class WrkResult:
    requests: int
    duration_s: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    errors: int
    non_2xx: int

    @property
    def rps(self) -> float:
        return self.requests / self.duration_s if self.duration_s else 0.0


def run_wrk(
    base_url: str,
    script: Path,
    connections: int,
    duration_s: int,
    cpus: str | None = None,
) -> WrkResult:
    threads = 1 if connections < 64 else 2
    command = [
        "wrk",
        f"-t{threads}",
        f"-c{connections}",
        f"-d{duration_s}s",
        "--timeout",
        "30s",
        "--latency",
        "-s",
        str(script),
        base_url,
    ]
    if cpus:
        command = ["taskset", "-c", cpus, *command]
    out = subprocess.run(command, capture_output=True, text=True, check=True, timeout=duration_s + 60)  # noqa: S603
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("WRK_JSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no summary:\n{out.stdout}\n{out.stderr}")
    raw = json.loads(line.removeprefix("WRK_JSON "))
    return WrkResult(
        requests=raw["requests"],
        duration_s=raw["duration_us"] / 1e6,
        p50_ms=raw["p50_us"] / 1000,
        p90_ms=raw["p90_us"] / 1000,
        p99_ms=raw["p99_us"] / 1000,
        errors=raw["errors"],
        non_2xx=raw["non_2xx"],
    )
