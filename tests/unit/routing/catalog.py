"""A small catalog for routing tests: one alias served in two regions by three providers."""

from __future__ import annotations

import msgspec

from gateway.auth.principal import Principal
from gateway.routing.deployment import DeploymentTable
from gateway.settings import Catalog

CATALOG = msgspec.convert(
    {
        "providers": [
            {"name": "openai-us", "kind": "openai", "region": "us-east", "base_url": "http://us.invalid/v1"},
            {"name": "vllm-eu", "kind": "openai", "region": "eu-west", "base_url": "http://eu.invalid/v1"},
            {"name": "claude-us", "kind": "anthropic", "region": "us-east", "base_url": "http://a.invalid"},
            {"name": "vllm-ap", "kind": "openai", "region": "ap-south", "base_url": "http://ap.invalid/v1"},
        ],
        "models": [
            {
                "name": "chat",
                "deployments": [
                    {"provider": "openai-us", "model": "gpt-x", "weight": 1.0},
                    {"provider": "vllm-eu", "model": "llama-x", "weight": 3.0},
                    {"provider": "claude-us", "model": "claude-x", "weight": 1.0},
                ],
            },
            {"name": "embed", "deployments": [{"provider": "openai-us", "model": "embed-x"}]},
        ],
    },
    Catalog,
)
TABLE = DeploymentTable.from_catalog(CATALOG)
CHAT = {d.provider.name: d for d in TABLE.by_model["chat"]}


def principal(team_id: str = "team-1", **limits: object) -> Principal:
    return Principal(key_id="key-1", key_prefix="gw-abc", team_id=team_id, team_name=team_id, **limits)  # type: ignore[arg-type]
