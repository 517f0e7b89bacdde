"""OpenTelemetry: a span per proxied request and per upstream attempt, and the GenAI client metrics,
exported over OTLP/HTTP when the standard `OTEL_*` variables ask for it (docs/observability.md).

`open_telemetry(settings)` builds a process's SDK in its lifespan (`gateway.services`), or nothing
when no OTLP endpoint is configured; the proxy calls the `Telemetry` it is given at the points it
already has (request start and end, attempt start, queue wait, usage event). Off, no request makes
any of it.
"""

from gateway.telemetry.otlp import open_telemetry
from gateway.telemetry.recorder import AttemptSpan, RequestTrace, Telemetry

__all__ = ["AttemptSpan", "RequestTrace", "Telemetry", "open_telemetry"]
