"""OpenTelemetry: a span per proxied request and per upstream attempt, and the GenAI client metrics,
exported over OTLP/HTTP when the standard `OTEL_*` variables ask for it (docs/observability.md).

`open_telemetry(settings)` builds a process's SDK in its lifespan (`gateway.services`), or nothing
when no OTLP endpoint is configured; the proxy calls the `Telemetry` it is given at the points it
already has (request start and end, attempt start, queue wait, usage event). Off, no request makes
any of it.
"""

from __future__ import annotations

from gateway.settings import Settings
from gateway.telemetry.recorder import AttemptSpan, RequestTrace, Telemetry

__all__ = ["AttemptSpan", "RequestTrace", "Telemetry", "open_telemetry"]


def open_telemetry(settings: Settings) -> Telemetry | None:
    """This process's telemetry, or None when neither traces nor metrics are exported.

    The SDK and its OTLP exporters (a hundred modules: protobuf, requests) are imported only by a
    process that exports: off, a worker does not even load them."""
    if not (settings.otel_traces or settings.otel_metrics):
        return None
    from gateway.telemetry.otlp import exporting_telemetry

    return exporting_telemetry(settings)
