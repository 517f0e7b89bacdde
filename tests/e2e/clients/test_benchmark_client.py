"""A benchmark client, run as its users run it, against `gateway serve` and the mock upstream:
llm-benchmark-runner (`llm-benchmark`, pinned in pyproject.toml) with its defaults, which stream 20
chat completions (5 at each of the concurrency levels 1, 2, 4 and 8).

guidellm, the client vLLM's project ships, needs torch (gigabytes of CUDA wheels) and a tokenizer
from the Hugging Face hub for its default data: neither installs or runs here. Serving engines'
benchmark clients probe `/health` before they start; this client does not, so the test probes it as
their harnesses do, then checks what the client measured against what the gateway metered.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Stack
from tests.support.gateway import Team

pytestmark = pytest.mark.e2e

CLIENT_TIMEOUT_S = 300
DEFAULT_REQUESTS = 20  # its --repeat (5) at each of its --concurrency levels (1,2,4,8)


@pytest.fixture
def team(stack: Stack) -> Team:
    return stack.new_team("benchmark-client")


def run_client(stack: Stack, team: Team, workdir: Path) -> dict[str, Any]:
    output = workdir / "benchmark.json"
    command = [
        sys.executable,
        "-m",
        "llm_benchmark_runner",
        "--url",
        stack.gateway.base_url,
        "--model",
        "chat",
        "--api-key",
        team.key,
        "--output",
        str(output),
    ]
    done = subprocess.run(
        command, cwd=workdir, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S, check=False
    )
    print(done.stdout[-3000:])
    assert done.returncode == 0, done.stderr[-3000:]
    session: dict[str, Any] = json.loads(output.read_text())
    return session


def test_the_benchmark_client_with_its_defaults_is_served_and_metered(
    stack: Stack, team: Team, tmp_path: Path
) -> None:
    health = httpx.get(f"{stack.gateway.base_url}/health", timeout=5)
    assert (health.status_code, health.json()) == (200, {"status": "ok"})

    session = run_client(stack, team, tmp_path)
    [result] = session["results"]
    levels = result["concurrencyResults"]
    assert [level["concurrency"] for level in levels] == [1, 2, 4, 8]
    assert sum(level["metrics"]["totalRequests"] for level in levels) == DEFAULT_REQUESTS
    assert all(level["metrics"]["successRate"] == 100 for level in levels), levels
    raw = result["rawResults"]
    assert len(raw) == DEFAULT_REQUESTS
    assert all(r["status"] == "success" and r["outputTokenCount"] > 0 for r in raw), raw
    # streamed: several content frames per answer, so its TTFT and inter-token latencies are real
    assert all(len(r["tokenTimestamps"]) > 1 for r in raw)
    single = result["singleConcurrency"]
    print(
        f"llm-benchmark defaults: TTFT p50 {single['ttft']['median']:.1f} ms, "
        f"E2E p50 {single['e2eLatency']['median']:.1f} ms, "
        + ", ".join(f"c={lvl['concurrency']}: {lvl['requestThroughput']:.1f} req/s" for lvl in levels)
    )

    [row] = stack.usage(team_id=team.id)
    assert row["requests"] == DEFAULT_REQUESTS
