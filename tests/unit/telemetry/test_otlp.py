"""Which signals the standard OpenTelemetry variables turn on, and the process's SDK built from them
(nothing at all when they ask for nothing)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gateway.settings import Settings, load_settings
from gateway.telemetry import open_telemetry
from gateway.telemetry.otlp import process_resource

CATALOG = """
providers:
  - {name: up, kind: openai, region: eu-west, base_url: "http://up.invalid/v1"}
models:
  - name: m
    deployments: [{provider: up, model: up-m, price: {input: 1, output: 1}}]
"""
ENDPOINT = "http://127.0.0.1:4318"


def settings_with(tmp_path: Path, **otel: str) -> Settings:
    config = tmp_path / "gateway.yaml"
    config.write_text(CATALOG)
    return load_settings({"GATEWAY_CONFIG": str(config), **otel})


@pytest.mark.parametrize(
    ("env", "traces", "metrics"),
    [
        ({}, False, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, True, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ENDPOINT + "/v1/traces"}, True, False),
        ({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": ENDPOINT + "/v1/metrics"}, False, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_SDK_DISABLED": "true"}, False, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_SDK_DISABLED": "TRUE"}, False, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_SDK_DISABLED": "false"}, True, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_METRICS_EXPORTER": "none"}, True, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_TRACES_EXPORTER": "none"}, False, True),
    ],
)
def test_the_standard_variables_choose_the_signals(
    tmp_path: Path, env: dict[str, str], traces: bool, metrics: bool
) -> None:
    settings = settings_with(tmp_path, **env)

    assert (settings.otel_traces, settings.otel_metrics) == (traces, metrics)


def test_without_an_endpoint_there_is_no_telemetry_at_all(tmp_path: Path) -> None:
    assert open_telemetry(settings_with(tmp_path)) is None


def test_with_an_endpoint_the_process_has_its_tracer_and_meter(tmp_path: Path) -> None:
    telemetry = open_telemetry(settings_with(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=ENDPOINT))

    assert telemetry is not None
    telemetry.shutdown()  # nothing was recorded: nothing is sent


def test_the_service_is_named_gateway_unless_the_environment_names_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    assert process_resource().attributes["service.name"] == "gateway"
    assert process_resource().attributes["service.instance.id"]

    monkeypatch.setenv("OTEL_SERVICE_NAME", "llm-gateway-eu")
    assert process_resource().attributes["service.name"] == "llm-gateway-eu"


def test_a_process_that_exports_nothing_never_loads_the_exporters() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, gateway.app, gateway.services; print(sorted(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "'gateway.telemetry.otlp'" not in loaded
    assert "opentelemetry.exporter" not in loaded  # nor protobuf's encoders and requests
