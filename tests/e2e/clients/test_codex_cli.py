"""Codex CLI (npm `@openai/codex`, pinned) runs `codex exec` turns through the gateway, as its users
configure it (docs/clients.md): against the embedded default (`config/gateway.yaml`, the built-in
mock provider, SQLite, no Redis), and against an OpenAI-kind upstream (the mock upstream) that
serves the Responses API itself, one translated to chat, and an Anthropic-kind one. There the upstream plays an agent's
turn (`call_tool`): it calls Codex's `exec_command`, Codex runs it and sends its output back, and
the turn ends in text.

Codex 0.171 sends a `namespace` tool (multi_agent_v1) and `web_search` on every turn (live here,
where its sandbox is off), `reasoning.summary`, `include`, `store: false`, `client_metadata`...:
a turn completing through a translated provider is the proof that each is handled. The package is installed by the test set-up (tests/support/npm_clients: skipped with the
reason when npm or the registry cannot be reached, failed under CI=true).
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

from tests.support.gateway import REPO, GatewayProcess, Team, create_team
from tests.support.npm_clients import NpmPackage, require
from tests.support.upstream import RunningUpstream, start_mock_upstream

CODEX = NpmPackage("@openai/codex", "0.171.0", "codex")
ADMIN_KEY = "admin-codex-cli-0123456789abcdef0123456789"
TOOL_OUTPUT = "gateway-tool-ok"
RUN_TIMEOUT_S = 180  # a bound on a hung CLI, not a measurement

UPSTREAM_CONFIG = """
providers:
  - name: openai-native           # serves the Responses API itself
    kind: openai
    region: us-east
    base_url: {upstream}/v1
    api_key: upstream-secret-openai
    responses_api: native
    timeout_s: 30
  - name: selfhosted              # auto: not api.openai.com, so translated to chat
    kind: openai
    region: us-east
    base_url: {upstream}/v1
    timeout_s: 30
  - name: up-anthropic            # Responses translated to Anthropic's Messages
    kind: anthropic
    region: us-east
    base_url: {upstream}
    api_key: upstream-secret-anthropic
    timeout_s: 30
models:
  - name: gpt-native
    deployments:
      - provider: openai-native
        model: gpt-upstream
        price: {{input: 1.25, output: 10}}
  - name: llama
    deployments:
      - provider: selfhosted
        model: llama-upstream
        price: {{input: 0.60, output: 0.80}}
  - name: claude-coder
    deployments:
      - provider: up-anthropic
        model: claude-upstream
        price: {{input: 3, output: 15}}
"""


# --- the CLI ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def codex() -> Path:
    return require(CODEX)


@dataclass
class CodexRun:
    returncode: int
    output: str  # stdout and stderr
    last_message: str  # the turn's final text (`-o`)


def codex_config(base_url: str, model: str) -> str:
    """$CODEX_HOME/config.toml as docs/clients.md gives it: the gateway as a Responses provider,
    and nothing that reaches another host (no analytics, feedback or update check)."""
    return f"""\
model_provider = "gw"
model = "{model}"
check_for_update_on_startup = false

[model_providers.gw]
name = "gateway"
base_url = "{base_url}/v1"
env_key = "GW_KEY"
wire_api = "responses"

[analytics]
enabled = false

[feedback]
enabled = false
"""


def run_codex(codex: Path, workdir: Path, base_url: str, key: str, model: str, prompt: str) -> CodexRun:
    home = workdir / "codex-home"
    project = workdir / "project"
    home.mkdir(exist_ok=True)
    project.mkdir(exist_ok=True)
    (home / "config.toml").write_text(codex_config(base_url, model))
    last = workdir / "last-message.txt"
    env = {
        name: value for name, value in os.environ.items() if not name.startswith(("OPENAI_", "CODEX_"))
    } | {"GW_KEY": key, "CODEX_HOME": str(home), "NO_COLOR": "1"}
    # The sandbox is bypassed: the only command the upstream asks for is an echo, and a container
    # may not allow Codex's own sandbox (bubblewrap), which would make the tool's output an error.
    finished = subprocess.run(
        [str(codex), "exec", "--strict-config", "--ephemeral", "--skip-git-repo-check", "--color", "never",
         "--dangerously-bypass-approvals-and-sandbox", "-C", str(project), "-o", str(last), prompt],
        env=env, cwd=project, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    output = finished.stdout + finished.stderr
    print(f"$ codex exec {prompt!r} (model {model}) -> {finished.returncode}\n{output}")
    return CodexRun(finished.returncode, output, last.read_text() if last.exists() else "")


# --- the gateways -----------------------------------------------------------------------------


def start_gateway(workdir: Path, config: str) -> Iterator[tuple[GatewayProcess, Team]]:
    """`gateway serve` on `config` with a SQLite file and no Redis (the embedded default's stores),
    and a team with a key."""
    config_path = workdir / "gateway.yaml"
    config_path.write_text(config)
    gateway = GatewayProcess(
        config_path,
        {
            "GATEWAY_DATABASE_URL": f"sqlite:///{workdir / 'gateway.db'}",
            "GATEWAY_REDIS_URL": "",
            "GATEWAY_ADMIN_KEY": ADMIN_KEY,
        },
    )
    gateway.start()
    try:
        with httpx.Client(
            base_url=gateway.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"}
        ) as admin:
            team = create_team(admin, "codex-cli")
        yield gateway, team
    finally:
        gateway.stop()


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GatewayProcess, Team]]:
    default = (REPO / "config" / "gateway.yaml").read_text()
    yield from start_gateway(tmp_path_factory.mktemp("codex-embedded"), default)


@pytest.fixture(scope="module")
def mock_upstream() -> Iterator[RunningUpstream]:
    upstream = start_mock_upstream()
    try:
        yield upstream
    finally:
        upstream.stop()


@pytest.fixture(scope="module")
def fronted(
    tmp_path_factory: pytest.TempPathFactory, mock_upstream: RunningUpstream
) -> Iterator[tuple[GatewayProcess, Team]]:
    config = UPSTREAM_CONFIG.format(upstream=mock_upstream.base_url)
    yield from start_gateway(tmp_path_factory.mktemp("codex-upstream"), config)


# --- the turns --------------------------------------------------------------------------------


def test_a_turn_through_the_embedded_default(
    codex: Path, embedded: tuple[GatewayProcess, Team], tmp_path: Path
) -> None:
    gateway, team = embedded

    run = run_codex(codex, tmp_path, gateway.base_url, team.key, "gpt-4o-mini", "say hi")

    assert run.returncode == 0
    assert run.last_message.strip()  # the mock provider's words
    assert "not available" not in run.output and "ERROR" not in run.output


def items_of(request: dict[str, Any]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = request["body"]["input"]
    return items


@pytest.mark.parametrize(
    ("model", "upstream_path"),
    [("gpt-native", "/v1/responses"), ("llama", "/v1/chat/completions"), ("claude-coder", "/v1/messages")],
    ids=["passed-through", "translated-to-chat", "translated-to-anthropic"],
)
def test_a_turn_that_calls_a_tool(
    codex: Path,
    fronted: tuple[GatewayProcess, Team],
    mock_upstream: RunningUpstream,
    tmp_path: Path,
    model: str,
    upstream_path: str,
) -> None:
    gateway, team = fronted
    mock_upstream.clear()
    mock_upstream.set_behaviour(call_tool="exec_command", call_arguments={"cmd": f"echo {TOOL_OUTPUT}"})
    try:
        run = run_codex(codex, tmp_path, gateway.base_url, team.key, model, "print the greeting")
    finally:
        mock_upstream.set_behaviour()

    assert run.returncode == 0
    assert run.last_message.strip()
    requests = [r for r in mock_upstream.requests() if r["path"] == upstream_path]
    assert len(requests) == 2  # the call, then the text once the output came back
    first, second = (r["body"] for r in requests)
    if upstream_path == "/v1/responses":  # as Codex sent them: OpenAI runs its built-in tools
        assert {"type": "web_search", "external_web_access": True} in first["tools"]  # network allowed
        assert any(tool["type"] == "namespace" for tool in first["tools"])
        outputs = [item for item in second["input"] if item.get("type") == "function_call_output"]
        answered = outputs[-1]["output"]
    elif upstream_path == "/v1/messages":  # Anthropic's tools: flattened too, web_search left out
        assert all("input_schema" in tool for tool in first["tools"])
        assert "multi_agent_v1__close_agent" in [tool["name"] for tool in first["tools"]]
        results = [part for part in second["messages"][-1]["content"] if part.get("type") == "tool_result"]
        answered = results[-1]["content"]
    else:  # flattened to function tools, web_search left out
        assert all(tool["type"] == "function" for tool in first["tools"])
        assert "multi_agent_v1__close_agent" in [tool["function"]["name"] for tool in first["tools"]]
        assert second["messages"][-1]["role"] == "tool"
        answered = second["messages"][-1]["content"]
    assert TOOL_OUTPUT in json.dumps(answered)  # Codex ran the command the upstream asked for


def test_a_call_of_a_namespace_function_reaches_its_handler_in_codex(
    codex: Path, fronted: tuple[GatewayProcess, Team], mock_upstream: RunningUpstream, tmp_path: Path
) -> None:
    """Translated, the upstream calls the flattened `multi_agent_v1__close_agent`; Codex gets
    `namespace` and `name` apart and runs its close_agent, whose answer for an id that is not an
    agent's goes back as the tool's output (an unknown tool would get Codex's `unsupported call`)."""
    gateway, team = fronted
    mock_upstream.clear()
    mock_upstream.set_behaviour(
        call_tool="multi_agent_v1__close_agent", call_arguments={"target": "no-agent"}
    )
    try:
        run = run_codex(codex, tmp_path, gateway.base_url, team.key, "llama", "close the agent")
    finally:
        mock_upstream.set_behaviour()

    assert run.returncode == 0
    requests = [r["body"] for r in mock_upstream.requests() if r["path"] == "/v1/chat/completions"]
    assert len(requests) == 2
    call, output = requests[1]["messages"][-2:]
    assert [c["function"]["name"] for c in call["tool_calls"]] == ["multi_agent_v1__close_agent"]
    assert output["role"] == "tool" and output["tool_call_id"] == call["tool_calls"][0]["id"]
    assert "invalid agent id no-agent" in json.dumps(output["content"])
    assert "unsupported call" not in json.dumps(output["content"])
