"""Model aliases: `aliases` on a catalog model, validated at load, listed by /v1/models and
routed as the model itself on every endpoint (a client's default model name, such as Claude
Code's, pointing at a self-hosted model)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from litestar.testing import AsyncTestClient

from gateway.app import create_app
from gateway.routing.deployment import DeploymentTable
from gateway.settings import Catalog, ConfigError, load_catalog
from tests.fuzz.stack import ADMIN_KEY, fuzz_settings, prepare_database

CATALOG = """
providers:
  - name: local
    kind: mock
    region: us-east
models:
  - name: qwen
    aliases: [{qwen_aliases}]
    deployments:
      - provider: local
        model: qwen-upstream
        price: {{input: 0.10, output: 0.20}}
  - name: embed
    aliases: [{embed_aliases}]
    deployments:
      - provider: local
        model: embed-upstream
"""
ALIASES = "claude-sonnet-4-5, gpt-5.6-luna"


def write(tmp_path: Path, qwen_aliases: str = ALIASES, embed_aliases: str = "") -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(textwrap.dedent(CATALOG.format(qwen_aliases=qwen_aliases, embed_aliases=embed_aliases)))
    return path


def load(tmp_path: Path, qwen_aliases: str = ALIASES, embed_aliases: str = "") -> Catalog:
    return load_catalog(write(tmp_path, qwen_aliases, embed_aliases), {})


def test_an_alias_is_the_model_itself_in_the_deployment_table(tmp_path: Path) -> None:
    table = DeploymentTable.from_catalog(load(tmp_path))
    assert table.by_model["claude-sonnet-4-5"] is table.by_model["qwen"]
    assert table.by_model["gpt-5.6-luna"][0].model == "qwen"  # recorded under the model's name
    assert table.aliases == {"claude-sonnet-4-5": "qwen", "gpt-5.6-luna": "qwen"}
    assert sorted(d.id for d in table.all()) == ["local/embed-upstream", "local/qwen-upstream"]
    assert table.models == ["qwen", "embed"]


@pytest.mark.parametrize(
    ("qwen_aliases", "embed_aliases", "problem"),
    [
        ("embed", "", r"models\[0\]\.aliases\[0\]: 'embed' is the name of a model"),
        ("qwen", "", r"models\[0\]\.aliases\[0\]: 'qwen' is the name of a model"),
        (
            "claude-sonnet-4-5",
            "claude-sonnet-4-5",
            r"models\[1\]\.aliases\[0\]: .* already an alias of 'qwen'",
        ),
        ("a, a", "", r"models\[0\]\.aliases\[1\]: 'a' is already an alias of 'qwen'"),
        ("' '", "", r"models\[0\]\.aliases\[0\]: must not be empty"),
    ],
)
def test_an_alias_naming_a_model_or_another_alias_is_a_config_error(
    tmp_path: Path, qwen_aliases: str, embed_aliases: str, problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem):
        load(tmp_path, qwen_aliases, embed_aliases)


async def test_aliases_are_listed_and_reach_the_model_on_every_endpoint(tmp_path: Path) -> None:
    settings = fuzz_settings(tmp_path, write(tmp_path))
    _, secret = await prepare_database(settings)
    auth = {"Authorization": f"Bearer {secret}"}
    async with AsyncTestClient(app=create_app(settings)) as client:
        listed = (await client.get("/v1/models", headers=auth)).json()["data"]
        assert sorted(m["id"] for m in listed) == ["claude-sonnet-4-5", "embed", "gpt-5.6-luna", "qwen"]
        one = await client.get("/v1/models/claude-sonnet-4-5", headers=auth)
        assert (one.status_code, one.json()["owned_by"]) == (200, "local")

        say = [{"role": "user", "content": "hello"}]
        chat = await client.post(
            "/v1/chat/completions", json={"model": "gpt-5.6-luna", "messages": say}, headers=auth
        )
        assert chat.status_code == 200, chat.text
        assert chat.headers["x-gateway-upstream-model"] == "qwen-upstream"
        messages = await client.post(
            "/v1/messages",
            json={"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": say},
            headers={"x-api-key": secret},
        )
        assert messages.status_code == 200, messages.text
        assert messages.headers["x-gateway-upstream-model"] == "qwen-upstream"
        responses = await client.post(
            "/v1/responses", json={"model": "claude-sonnet-4-5", "input": "hi"}, headers=auth
        )
        assert responses.status_code == 200, responses.text
        unknown = await client.post(
            "/v1/chat/completions", json={"model": "claude-opus", "messages": say}, headers=auth
        )
        assert unknown.status_code == 404


async def test_a_key_that_may_use_a_model_may_use_its_aliases(tmp_path: Path) -> None:
    settings = fuzz_settings(tmp_path, write(tmp_path))
    await prepare_database(settings)
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    async with AsyncTestClient(app=create_app(settings)) as client:
        team = (await client.post("/admin/teams", json={"name": "aliased"}, headers=admin)).json()
        made = await client.post(
            "/admin/keys",
            json={"team_id": team["id"], "name": "qwen-only", "allowed_models": ["qwen"]},
            headers=admin,
        )
        auth = {"Authorization": f"Bearer {made.json()['key']}"}
        listed = (await client.get("/v1/models", headers=auth)).json()["data"]
        assert sorted(m["id"] for m in listed) == ["claude-sonnet-4-5", "gpt-5.6-luna", "qwen"]
        say = [{"role": "user", "content": "hello"}]
        aliased = await client.post(
            "/v1/chat/completions", json={"model": "gpt-5.6-luna", "messages": say}, headers=auth
        )
        assert aliased.status_code == 200, aliased.text
        other = await client.post("/v1/embeddings", json={"model": "embed", "input": "x"}, headers=auth)
        assert other.status_code == 403
