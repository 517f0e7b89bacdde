"""The test catalog builder means what the YAML means: a catalog built in code equals the one the
gateway loads from the same settings written as YAML."""

from __future__ import annotations

from pathlib import Path

from gateway.settings import ProviderKind, RetrySettings, load_catalog
from tests.support.catalogs import base_url, catalog, deployment, model, provider

YAML = """
providers:
  - {name: up, kind: openai, region: eu-west, base_url: "http://up.invalid/v1"}
  - {name: claude, kind: anthropic, region: us-east, base_url: "http://claude.invalid"}
models:
  - name: chat
    deployments:
      - {provider: up, model: up-model, price: {input: "0.02", output: 2}}
      - {provider: claude, model: claude-model, weight: 3}
  - name: up
    deployments: [{provider: up, model: up-upstream}]
retry: {max_attempts: 1}
"""


def test_a_built_catalog_equals_the_loaded_yaml(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(YAML)
    up = provider(base_url=base_url("openai"))
    claude = provider(
        "claude", ProviderKind.ANTHROPIC, region="us-east", base_url=base_url("anthropic", "claude.invalid")
    )

    built = catalog(
        up,
        claude,
        models=[
            model(
                "chat",
                deployment(up, "up-model", price={"input": "0.02", "output": 2}),
                deployment(claude, "claude-model", weight=3),
            ),
            model("up", deployment(up)),
        ],
        retry=RetrySettings(max_attempts=1),
    )

    assert built == load_catalog(path, {})


def test_without_models_each_provider_serves_an_alias_of_its_name() -> None:
    built = catalog(provider("a"), provider("b", "mock"))

    assert [(m.name, [(d.provider, d.model) for d in m.deployments]) for m in built.models] == [
        ("a", [("a", "a-upstream")]),
        ("b", [("b", "b-upstream")]),
    ]
