"""Settings: the YAML catalog with `${ENV}` substitution, validation messages, the environment, check-config."""

from __future__ import annotations

import textwrap
from decimal import Decimal
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.settings import (
    BatchSettings,
    CircuitSettings,
    ConfigError,
    LimitSettings,
    ProviderKind,
    RetrySettings,
    load_catalog,
    load_settings,
    unpriced_deployments,
)

MINIMAL = """
providers:
  - name: vllm-eu
    kind: openai
    region: eu-west
    base_url: http://10.0.0.5:8000/v1/
models:
  - name: llama
    deployments:
      - provider: vllm-eu
        model: meta-llama/Llama-3.1-70B-Instruct
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def problem(tmp_path: Path, text: str, environ: dict[str, str] | None = None) -> str:
    """The ConfigError message for a catalog that must not load."""
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as raised:
        load_catalog(path, environ or {})
    message = str(raised.value)
    assert message.startswith(f"{path}: "), message  # always names the file first
    return message.removeprefix(f"{path}: ")


# --- defaults ---------------------------------------------------------------------------------


def test_minimal_catalog_takes_every_default(tmp_path: Path) -> None:
    catalog = load_catalog(write(tmp_path, MINIMAL), {})

    [provider] = catalog.providers
    assert provider.kind is ProviderKind.OPENAI
    assert provider.urls == ("http://10.0.0.5:8000/v1",)  # trailing slash dropped
    assert provider.api_key is None
    assert (provider.timeout_s, provider.connect_timeout_s) == (600.0, 10.0)
    assert (provider.api_version, provider.anthropic_version) == ("2024-10-21", "2023-06-01")
    assert provider.cache_hints == "auto" and provider.headers == {}
    [deployment] = catalog.models[0].deployments
    assert deployment.weight == 1.0
    assert (deployment.price.input, deployment.price.output) == (Decimal(0), Decimal(0))
    assert deployment.price.cached_input is None and deployment.price.cache_write is None
    assert catalog.retry == RetrySettings(
        max_attempts=3, backoff_base_s=0.2, backoff_max_s=5.0, retry_after_cap_s=30.0
    )
    assert catalog.circuit == CircuitSettings(failure_threshold=5, cooldown_s=30.0)
    assert catalog.batches == BatchSettings(idle_ttl_s=3600)
    assert catalog.limits == LimitSettings(
        max_body_bytes=32 * 1024 * 1024, max_messages=10_000, max_upstream_response_bytes=64 * 1024 * 1024
    )


def test_replica_urls_and_exact_prices(tmp_path: Path) -> None:
    text = MINIMAL.replace(
        "    base_url: http://10.0.0.5:8000/v1/",
        "    base_urls: [http://a:8000/v1/, http://b:8000/v1]",
    ).replace(
        "        model: meta-llama/Llama-3.1-70B-Instruct",
        "        model: meta-llama/Llama-3.1-70B-Instruct\n"
        "        price: {input: 0.15, output: 0.60, cached_input: 0.075, cache_write: 1e-1}",
    )
    catalog = load_catalog(write(tmp_path, text), {})

    assert catalog.providers[0].urls == ("http://a:8000/v1", "http://b:8000/v1")
    price = catalog.models[0].deployments[0].price
    assert (price.input, price.output) == (Decimal("0.15"), Decimal("0.60"))
    assert (price.cached_input, price.cache_write) == (Decimal("0.075"), Decimal("0.1"))


def test_the_shipped_default_config_is_valid() -> None:
    catalog = load_catalog(Path(__file__).resolve().parents[3] / "config" / "gateway.yaml", {})
    assert {p.kind for p in catalog.providers} == {ProviderKind.MOCK}


# --- ${ENV} substitution ----------------------------------------------------------------------

WITH_REFERENCES = """
providers:
  - name: up
    kind: openai
    region: ${REGION:-eu-west}
    base_urls: ["http://${HOST}:8000/v1", "http://${HOST}:8001/v1"]
    api_key: ${UP_KEY}
    timeout_s: ${TIMEOUT_S:-30}
    headers: {x-tenant: "${TENANT:-}"}
models:
  - name: m
    deployments: [{provider: up, model: m}]
"""


def test_references_are_replaced_from_the_environment(tmp_path: Path) -> None:
    environ = {"HOST": "10.0.0.7", "UP_KEY": "sk-secret", "REGION": "us-east", "TIMEOUT_S": "45"}
    provider = load_catalog(write(tmp_path, WITH_REFERENCES), environ).providers[0]

    assert provider.urls == ("http://10.0.0.7:8000/v1", "http://10.0.0.7:8001/v1")
    assert provider.api_key == "sk-secret"
    assert provider.region == "us-east"  # a set variable wins over its default
    assert provider.timeout_s == 45.0  # a substituted string still becomes a number


def test_defaults_apply_when_the_variable_is_unset(tmp_path: Path) -> None:
    provider = load_catalog(write(tmp_path, WITH_REFERENCES), {"HOST": "h", "UP_KEY": "k"}).providers[0]

    assert provider.region == "eu-west"
    assert provider.timeout_s == 30.0
    assert provider.headers == {"x-tenant": ""}  # `${VAR:-}` defaults to the empty string


def test_a_set_but_empty_variable_is_used_as_is(tmp_path: Path) -> None:
    environ = {"HOST": "h", "UP_KEY": "", "REGION": ""}
    provider = load_catalog(write(tmp_path, WITH_REFERENCES), environ).providers[0]
    assert provider.api_key == "" and provider.region == ""


def test_an_unset_variable_without_default_names_the_key_and_the_variable(tmp_path: Path) -> None:
    message = problem(tmp_path, WITH_REFERENCES, {"HOST": "h"})
    assert message == "providers[0].api_key: environment variable UP_KEY is not set"


def test_an_unset_variable_in_a_list_names_the_index(tmp_path: Path) -> None:
    message = problem(tmp_path, WITH_REFERENCES, {"UP_KEY": "k"})
    assert message == (  # each place that names it, at once
        "providers[0].base_urls[0]: environment variable HOST is not set; "
        "providers[0].base_urls[1]: environment variable HOST is not set"
    )


def test_every_unset_variable_is_named_at_once(tmp_path: Path) -> None:
    message = problem(tmp_path, WITH_REFERENCES, {})
    assert message.count("environment variable HOST is not set") == 2
    assert "providers[0].api_key: environment variable UP_KEY is not set" in message


# --- validation messages: file, key, problem --------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "key", "complaint"),
    [
        ("    kind: openai", "    kind: vllm", "providers[0].kind", "Invalid enum value 'vllm'"),
        (
            "    region: eu-west",
            "    region: eu-west\n    colour: blue",
            "providers[0]",
            "unknown field `colour`",
        ),
        (
            "    region: eu-west",
            "    region: eu-west\n    timeout_s: slow",
            "providers[0].timeout_s",
            "Expected `float`",
        ),
        (
            "        model: meta",
            "        weight: heavy\n        model: meta",
            "models[0].deployments[0].weight",
            "Expected `float`",
        ),
        (
            "  - name: llama\n",
            "  - name: llama\n    nicknames: [x]\n",
            "models[0]",
            "unknown field `nicknames`",
        ),
    ],
)
def test_schema_errors_name_the_key(tmp_path: Path, old: str, new: str, key: str, complaint: str) -> None:
    assert old in MINIMAL
    message = problem(tmp_path, MINIMAL.replace(old, new))
    assert message.startswith(f"{key}: "), message
    assert complaint in message


def test_a_missing_section_is_named(tmp_path: Path) -> None:
    message = problem(tmp_path, "providers: []\n")
    assert message.startswith("(top level): ") and "models" in message


def test_an_unknown_top_level_key_is_named(tmp_path: Path) -> None:
    message = problem(tmp_path, MINIMAL + "retries: {max_attempts: 2}\n")
    assert "unknown field `retries`" in message


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("    base_url: http://10.0.0.5:8000/v1/\n", "", "providers[0].base_url: required for a provider of kind openai"),
        (
            "    base_url: http://10.0.0.5:8000/v1/\n",
            "    base_url: http://a/v1\n    base_urls: [http://b/v1]\n",
            "providers[0]: give base_url or base_urls, not both",
        ),
        ("    region: eu-west", "    region: eu-west\n    cache_hints: always", "providers[0].cache_hints: must be auto, openai, pass or strip"),
        ("    region: eu-west", "    region: eu-west\n    service_tiers: yes-please", "providers[0].service_tiers: must be auto, forward or drop"),
        ("    kind: openai", "    kind: anthropic\n    service_tiers: forward", "providers[0].service_tiers: for OpenAI-compatible kinds (Anthropic's are mapped)"),
        ("    region: eu-west", "    region: eu-west\n    timeout_s: 0", "providers[0].timeout_s: must be positive"),
        ("      - provider: vllm-eu", "      - provider: vllm-us", "models[0].deployments[0].provider: unknown provider 'vllm-us' (known: vllm-eu)"),
        ("        model: meta", "        weight: 0\n        model: meta", "models[0].deployments[0].weight: must be positive"),
        ("        model: meta", "        price: {output: -1}\n        model: meta", "models[0].deployments[0].price.output: must not be negative"),
        ("        model: meta", "        price: {input: .inf}\n        model: meta", "models[0].deployments[0].price.input: must be a finite number"),
        ("        model: meta", "        price: {cache_write: NaN}\n        model: meta", "models[0].deployments[0].price.cache_write: must be a finite number"),
        ("    deployments:\n      - provider: vllm-eu\n        model: meta-llama/Llama-3.1-70B-Instruct", "    deployments: []", "models[0].deployments: a model needs at least one deployment"),
    ],
)  # fmt: skip
def test_reference_and_range_errors_name_the_key(tmp_path: Path, old: str, new: str, expected: str) -> None:
    assert old in MINIMAL
    assert problem(tmp_path, MINIMAL.replace(old, new)) == expected


def test_duplicate_names(tmp_path: Path) -> None:
    provider = MINIMAL.split("models:")[0].split("providers:\n")[1]
    two_providers = MINIMAL.replace(provider, provider + provider)
    assert problem(tmp_path, two_providers) == "providers[1].name: duplicate provider name 'vllm-eu'"
    model = MINIMAL.split("models:\n")[1]
    assert problem(tmp_path, MINIMAL + model) == "models[1].name: duplicate model name 'llama'"


def test_retry_needs_at_least_one_attempt(tmp_path: Path) -> None:
    assert (
        problem(tmp_path, MINIMAL + "retry: {max_attempts: 0}\n") == "retry.max_attempts: must be at least 1"
    )


def test_a_mock_provider_needs_no_base_url(tmp_path: Path) -> None:
    text = MINIMAL.replace("kind: openai", "kind: mock").replace(
        "    base_url: http://10.0.0.5:8000/v1/\n", ""
    )
    assert load_catalog(write(tmp_path, text), {}).providers[0].urls == ()


def test_unreadable_files(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match=rf"^{missing}: cannot read"):
        load_catalog(missing, {})
    assert problem(tmp_path, "providers: [unclosed\n").startswith("not valid YAML")
    assert problem(tmp_path, "- just\n- a list\n").startswith("the top level must be a mapping")


# --- the environment --------------------------------------------------------------------------


def test_environment_defaults(tmp_path: Path) -> None:
    settings = load_settings({"GATEWAY_CONFIG": str(write(tmp_path, MINIMAL))})

    assert settings.config_path == str(tmp_path / "gateway.yaml")
    assert settings.database_url == "sqlite:///data/gateway.db"
    assert settings.redis_url is None and settings.admin_key is None
    assert (settings.host, settings.port, settings.workers) == ("127.0.0.1", 8080, 1)
    assert settings.log_format == "json" and settings.key_cache_ttl_s == 5.0
    assert settings.metering_writer == "auto"  # `gateway serve` decides: a process with Redis


def test_environment_values(tmp_path: Path) -> None:
    settings = load_settings(
        {
            "GATEWAY_CONFIG": str(write(tmp_path, MINIMAL)),
            "GATEWAY_DATABASE_URL": "postgresql://gw@db/gateway",
            "GATEWAY_REDIS_URL": "redis://cache:6379/0",
            "GATEWAY_ADMIN_KEY": "admin-secret",
            "GATEWAY_HOST": "0.0.0.0",
            "GATEWAY_PORT": "9000",
            "GATEWAY_WORKERS": "4",
            "GATEWAY_LOG_FORMAT": "console",
            "GATEWAY_KEY_CACHE_TTL_S": "0.5",
            "GATEWAY_METERING_WRITER": "external",
        }
    )
    assert settings.metering_writer == "external"
    assert settings.database_url == "postgresql://gw@db/gateway"
    assert settings.redis_url == "redis://cache:6379/0" and settings.admin_key == "admin-secret"
    assert (settings.host, settings.port, settings.workers) == ("0.0.0.0", 9000, 4)
    assert settings.log_format == "console" and settings.key_cache_ttl_s == 0.5


def test_empty_optional_variables_mean_unset(tmp_path: Path) -> None:
    environ = {"GATEWAY_CONFIG": str(write(tmp_path, MINIMAL)), "GATEWAY_DATABASE_URL": "",
               "GATEWAY_REDIS_URL": "", "GATEWAY_ADMIN_KEY": "", "GATEWAY_PORT": ""}  # fmt: skip
    settings = load_settings(environ)
    assert settings.database_url == "sqlite:///data/gateway.db"
    assert settings.redis_url is None and settings.admin_key is None and settings.port == 8080


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("GATEWAY_PORT", "eighty", "GATEWAY_PORT: expected an integer, got 'eighty'"),
        ("GATEWAY_WORKERS", "2.5", "GATEWAY_WORKERS: expected an integer, got '2.5'"),
        ("GATEWAY_LOG_FORMAT", "xml", "GATEWAY_LOG_FORMAT: must be json or console, not 'xml'"),
        (
            "GATEWAY_METERING_WRITER",
            "thread",
            "GATEWAY_METERING_WRITER: must be auto, worker, process or external, not 'thread'",
        ),
        (
            "GATEWAY_METERING_WRITER",
            "process",
            "GATEWAY_METERING_WRITER=process needs GATEWAY_REDIS_URL: without Redis the usage events "
            "stay in the serving process, and its own writer moves them",
        ),
    ],
)
def test_bad_environment_values_name_the_variable(
    tmp_path: Path, name: str, value: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings({"GATEWAY_CONFIG": str(write(tmp_path, MINIMAL)), name: value})
    assert str(raised.value) == expected


def test_a_bad_key_cache_ttl_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="GATEWAY_KEY_CACHE_TTL_S"):
        load_settings({"GATEWAY_CONFIG": str(write(tmp_path, MINIMAL)), "GATEWAY_KEY_CACHE_TTL_S": "soon"})


def test_the_idempotency_settings(tmp_path: Path) -> None:
    config = str(write(tmp_path, MINIMAL))
    defaults = load_settings({"GATEWAY_CONFIG": config})
    chosen = load_settings(
        {
            "GATEWAY_CONFIG": config,
            "GATEWAY_IDEMPOTENCY_WINDOW_S": "3600",
            "GATEWAY_IDEMPOTENCY_LEASE_S": "30",
            "GATEWAY_IDEMPOTENCY_MAX_ANSWER_BYTES": "1024",
        }
    )

    assert (defaults.idempotency_window_s, defaults.idempotency_lease_s) == (86400.0, 600.0)
    assert defaults.idempotency_max_answer_bytes == 4 * 1024 * 1024
    assert (chosen.idempotency_window_s, chosen.idempotency_lease_s) == (3600.0, 30.0)
    assert chosen.idempotency_max_answer_bytes == 1024
    with pytest.raises(ConfigError, match="GATEWAY_IDEMPOTENCY_LEASE_S: must be more than 0"):
        load_settings({"GATEWAY_CONFIG": config, "GATEWAY_IDEMPOTENCY_LEASE_S": "0"})


def test_the_default_config_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "gateway.yaml").write_text(MINIMAL)
    monkeypatch.chdir(tmp_path)
    assert load_settings({}).config_path == "config/gateway.yaml"


# --- gateway check-config ---------------------------------------------------------------------


def test_check_config_reports_what_it_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, MINIMAL)
    monkeypatch.setenv("GATEWAY_CONFIG", str(path))

    assert main(["check-config"]) == 0

    assert capsys.readouterr().out.strip() == f"{path}: ok (1 providers, 1 models, 1 deployments)"


def test_check_config_fails_with_the_file_key_and_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, WITH_REFERENCES)
    monkeypatch.setenv("GATEWAY_CONFIG", str(path))
    monkeypatch.delenv("UP_KEY", raising=False)
    monkeypatch.setenv("HOST", "h")

    with pytest.raises(SystemExit) as exited:
        main(["check-config"])

    assert exited.value.code == 2
    assert capsys.readouterr().err.strip() == (
        f"gateway: configuration error: {path}: providers[0].api_key: environment variable UP_KEY is not set"
    )


# --- serving ----------------------------------------------------------------------------------


def test_the_body_budget_defaults_to_four_bodies_at_the_cap(tmp_path: Path) -> None:
    default = load_catalog(write(tmp_path, MINIMAL), {}).limits
    assert default.max_buffered_body_bytes is None
    assert default.buffered_body_bytes == 4 * 32 * 1024 * 1024
    raised = load_catalog(write(tmp_path, MINIMAL + "limits: {max_body_bytes: 1048576}\n"), {}).limits
    assert raised.buffered_body_bytes == 4 * 1048576
    text = MINIMAL + "limits: {max_buffered_body_bytes: 40000000}\n"
    assert load_catalog(write(tmp_path, text), {}).limits.buffered_body_bytes == 40_000_000


def test_a_body_budget_below_the_cap_is_refused(tmp_path: Path) -> None:
    text = MINIMAL + "limits: {max_body_bytes: 2048, max_buffered_body_bytes: 2047}\n"
    assert problem(tmp_path, text).startswith("limits.max_buffered_body_bytes: must be at least")


def test_the_connection_settings(tmp_path: Path) -> None:
    config = str(write(tmp_path, MINIMAL))
    default = load_settings({"GATEWAY_CONFIG": config})
    assert (default.keep_alive_timeout_s, default.limit_concurrency) == (5, None)  # uvicorn's defaults
    environ = {
        "GATEWAY_CONFIG": config,
        "GATEWAY_KEEP_ALIVE_TIMEOUT_S": "2",
        "GATEWAY_LIMIT_CONCURRENCY": "500",
    }
    given = load_settings(environ)
    assert (given.keep_alive_timeout_s, given.limit_concurrency) == (2, 500)


@pytest.mark.parametrize("name", ["GATEWAY_KEEP_ALIVE_TIMEOUT_S", "GATEWAY_LIMIT_CONCURRENCY"])
@pytest.mark.parametrize(
    ("value", "expected"),
    [("0", "must be at least 1"), ("-3", "must be at least 1"), ("1.5", "expected an integer")],
)
def test_bad_connection_settings_name_the_variable(
    tmp_path: Path, name: str, value: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings({"GATEWAY_CONFIG": str(write(tmp_path, MINIMAL)), name: value})
    assert str(raised.value).startswith(f"{name}: {expected}")


# --- prices -----------------------------------------------------------------------------------

PRICED_AND_NOT = """
providers:
  - {name: vllm, kind: openai, region: eu-west, base_url: "http://10.0.0.5:8000/v1"}
  - {name: mock, kind: mock, region: eu-west}
models:
  - name: llama
    deployments:
      - {provider: vllm, model: llama-70b}
      - {provider: vllm, model: llama-8b, price: {input: 0, output: 0, cached_input: 0}}
      - {provider: vllm, model: llama-405b, price: {input: 0.6, output: 0.8}}
      - {provider: vllm, model: llama-batch, price: {batch_output: 0.4}}
      - {provider: mock, model: mock-chat}
  - name: llama-alias
    deployments:
      - {provider: vllm, model: llama-70b}
"""


def test_unpriced_deployments_are_those_with_every_rate_zero(tmp_path: Path) -> None:
    catalog = load_catalog(write(tmp_path, PRICED_AND_NOT), {})
    # any one rate prices a deployment; a mock costs nothing; a shared deployment is named once
    assert unpriced_deployments(catalog) == ["vllm/llama-70b", "vllm/llama-8b"]


def test_the_example_catalog_prices_every_deployment() -> None:
    example = Path(__file__).resolve().parents[3] / "config" / "gateway.example.yaml"
    catalog = load_catalog(
        example, {"OPENAI_API_KEY": "x", "ANTHROPIC_API_KEY": "x", "AZURE_OPENAI_KEY": "x"}
    )
    assert unpriced_deployments(catalog) == []
    assert {p.kind for p in catalog.providers} == {
        ProviderKind.OPENAI,
        ProviderKind.AZURE,
        ProviderKind.ANTHROPIC,
    }
    assert any(p.capacity is not None and p.capacity.limited for p in catalog.providers)


def test_check_config_warns_once_per_unpriced_deployment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GATEWAY_CONFIG", str(write(tmp_path, PRICED_AND_NOT)))
    monkeypatch.delenv("GATEWAY_REDIS_URL", raising=False)
    monkeypatch.delenv("GATEWAY_WORKERS", raising=False)

    assert main(["check-config"]) == 0  # a warning, not a refusal

    out, err = capsys.readouterr()
    assert ": ok (2 providers, 2 models, 6 deployments)" in out
    assert err.splitlines() == [
        "gateway: warning: deployment vllm/llama-70b has no price: metered at 0 USD",
        "gateway: warning: deployment vllm/llama-8b has no price: metered at 0 USD",
    ]
