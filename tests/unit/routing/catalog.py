"""A small catalog for routing tests: one alias served in two regions by three providers."""

from __future__ import annotations

from gateway.auth.principal import Principal
from gateway.routing.deployment import DeploymentTable
from gateway.settings import ProviderKind
from tests.support.catalogs import catalog, deployment, model, provider

CATALOG = catalog(
    provider("openai-us", region="us-east", base_url="http://us.invalid/v1"),
    provider("vllm-eu", region="eu-west", base_url="http://eu.invalid/v1"),
    provider("claude-us", ProviderKind.ANTHROPIC, region="us-east", base_url="http://a.invalid"),
    provider("vllm-ap", region="ap-south", base_url="http://ap.invalid/v1"),
    models=[
        model(
            "chat",
            deployment("openai-us", "gpt-x"),
            deployment("vllm-eu", "llama-x", weight=3.0),
            deployment("claude-us", "claude-x"),
        ),
        model("embed", deployment("openai-us", "embed-x")),
    ],
)
TABLE = DeploymentTable.from_catalog(CATALOG)
CHAT = {d.provider.name: d for d in TABLE.by_model["chat"]}
_REPLICAS = provider(
    "vllm-replicas", region="eu-west", base_urls=("http://r0.invalid/v1", "http://r1.invalid/v1")
)
# The same plus a model at two replicas: where the gateway places requests by their prompt's prefix
PLACED_TABLE = DeploymentTable.from_catalog(
    catalog(*CATALOG.providers, _REPLICAS, models=[*CATALOG.models, model("m", deployment(_REPLICAS, "m-x"))])
)


def principal(team_id: str = "team-1", **limits: object) -> Principal:
    return Principal(key_id="key-1", key_prefix="gw-abc", team_id=team_id, team_name=team_id, **limits)  # type: ignore[arg-type]
