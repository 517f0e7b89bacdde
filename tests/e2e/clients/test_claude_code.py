"""Claude Code itself (`claude -p`, pinned) against the gateway in its embedded default (a SQLite
file, no Redis): a whole turn in which the model calls Claude Code's Read tool, Claude Code runs it
and sends its output back, and the model answers; served by an Anthropic-kind provider (passed
through) and by an OpenAI-kind one (translated), both the mock upstream, and plain text from the
built-in mock provider.

The mock plays the model (`call_tool`): it calls Read on a file of the project until the
conversation ends with the tool's result. Claude Code's own default names (`claude-sonnet-4-5`)
are aliases of the catalog; a name it does not know (`coder`) makes it send system turns inside
`messages` and an `effort`.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.gateway import GatewayProcess, Team, create_team
from tests.support.npm_clients import NpmPackage, require
from tests.support.upstream import RunningUpstream, start_mock_upstream

CLAUDE_CODE = NpmPackage("@anthropic-ai/claude-code", "2.1.332", "claude")
ADMIN_KEY = "admin-claude-code-secret"
SECRET_WORD = "pelican"
TURN_TIMEOUT_S = 180

CONFIG = """
providers:
  - name: up-anthropic
    kind: anthropic
    region: us-east
    base_url: {upstream}
    api_key: upstream-secret-anthropic
  - name: up-openai
    kind: openai
    region: us-east
    base_url: {upstream}/v1
    api_key: upstream-secret-openai
  - name: built-in
    kind: mock
    region: us-east
models:
  - name: claude-sonnet-4-5
    deployments:
      - provider: up-anthropic
        model: claude-upstream
        price: {{input: 3, output: 15}}
  - name: claude-haiku-4-5
    deployments:
      - provider: up-openai
        model: haiku-on-chat
        price: {{input: 1, output: 5}}
  - name: coder
    deployments:
      - provider: up-openai
        model: coder-on-chat
        price: {{input: 0.5, output: 1.5}}
  - name: local
    deployments:
      - provider: built-in
        model: local-mock
"""
# alias -> the upstream path its requests land on
UPSTREAM_PATHS = {
    "claude-sonnet-4-5": "/v1/messages",
    "claude-haiku-4-5": "/v1/chat/completions",
    "coder": "/v1/chat/completions",
}


@dataclass
class ClaudeCodeStack:
    claude: Path
    gateway: GatewayProcess
    upstream: RunningUpstream
    team: Team
    project: Path
    home: Path

    def run(self, prompt: str, model: str) -> dict[str, Any]:
        """One `claude -p` turn; its JSON result."""
        env = {
            name: value for name, value in os.environ.items() if not name.startswith(("ANTHROPIC_", "CLAUDE"))
        }
        env |= claude_code_environment(self.gateway.base_url, self.team.key) | {"HOME": str(self.home)}
        command = [
            str(self.claude),
            "-p",
            prompt,
            "--model",
            model,
            "--output-format",
            "json",
            "--max-turns",
            "4",
        ]
        done = subprocess.run(
            command, cwd=self.project, env=env, capture_output=True, text=True, timeout=TURN_TIMEOUT_S
        )
        assert done.returncode == 0, f"claude exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        result: dict[str, Any] = json.loads(done.stdout)
        return result


def claude_code_environment(gateway_url: str, key: str) -> dict[str, str]:
    """Claude Code's settings for the gateway (docs/clients.md): the gateway's root, a team key,
    and nothing sent anywhere else."""
    return {
        "ANTHROPIC_BASE_URL": gateway_url,
        "ANTHROPIC_API_KEY": key,
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
    }


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClaudeCodeStack]:
    claude = require(CLAUDE_CODE)
    workdir = tmp_path_factory.mktemp("claude-code")
    upstream = start_mock_upstream()
    config = workdir / "gateway.yaml"
    config.write_text(CONFIG.format(upstream=upstream.base_url))
    env = {  # the embedded default: no GATEWAY_REDIS_URL
        "GATEWAY_DATABASE_URL": f"sqlite:///{workdir / 'gateway.db'}",
        "GATEWAY_ADMIN_KEY": ADMIN_KEY,
    }
    gateway: GatewayProcess | None = None
    try:
        gateway = GatewayProcess(config, env).start()
        with httpx.Client(
            base_url=gateway.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"}
        ) as admin:
            team = create_team(admin, "claude-code")
        project, home = workdir / "project", workdir / "home"
        project.mkdir()
        home.mkdir()
        (project / "note.txt").write_text(f"the secret word is {SECRET_WORD}\n")
        yield ClaudeCodeStack(claude, gateway, upstream, team, project, home)
    finally:
        if gateway is not None:
            gateway.stop()
        upstream.stop()


@pytest.fixture
def upstream(stack: ClaudeCodeStack) -> Iterator[RunningUpstream]:
    stack.upstream.clear()
    stack.upstream.set_behaviour(
        call_tool="Read", call_arguments={"file_path": str(stack.project / "note.txt")}
    )
    yield stack.upstream
    stack.upstream.set_behaviour()


def tool_outputs(request: dict[str, Any]) -> list[str]:
    """The tool results a recorded upstream request carries, in either API's format."""
    outputs = []
    for message in request["body"]["messages"]:
        if message["role"] == "tool":
            outputs.append(json.dumps(message["content"]))
        elif message["role"] == "user" and isinstance(message["content"], list):
            outputs += [
                json.dumps(block) for block in message["content"] if block.get("type") == "tool_result"
            ]
    return outputs


@pytest.mark.parametrize("model", list(UPSTREAM_PATHS))
def test_a_turn_that_calls_a_tool(stack: ClaudeCodeStack, upstream: RunningUpstream, model: str) -> None:
    result = stack.run("What is the secret word in note.txt?", model)

    assert (result["subtype"], result["is_error"]) == ("success", False), result
    assert result["num_turns"] == 2  # the tool call, then the answer
    assert result["result"]
    requests = [r for r in upstream.requests() if r["path"] == UPSTREAM_PATHS[model]]
    assert len(requests) == 2
    first, second = requests
    assert not tool_outputs(first)
    (output,) = tool_outputs(second)
    assert SECRET_WORD in output  # Claude Code read the file and sent it back through the gateway
    if UPSTREAM_PATHS[model] == "/v1/messages":
        assert "context-management" in second["headers"]["anthropic-beta"]
    else:
        assert "anthropic-beta" not in second["headers"]


def test_a_plain_turn_on_the_built_in_mock(stack: ClaudeCodeStack) -> None:
    result = stack.run("say hi", "local")

    assert (result["subtype"], result["is_error"]) == ("success", False), result
    assert result["result"]
