"""A process's OpenTelemetry SDK, built in its lifespan (`gateway.telemetry.open_telemetry`, called
by `gateway.services`): a tracer provider and a meter provider, each exporting over OTLP/HTTP
(protobuf).

Whether each signal is on is the settings' (an OTLP endpoint configured, `OTEL_SDK_DISABLED` not
true: `gateway.settings`); everything else is the SDK's own reading of the standard variables:
endpoints, headers, timeouts, compression, the sampler (`OTEL_TRACES_SAMPLER`), batching
(`OTEL_BSP_*`), the metric export interval (`OTEL_METRIC_EXPORT_INTERVAL`) and the resource
(`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`). Nothing is made global: no other library's
instrumentation picks these providers up. Each worker builds its own after the fork (its exporter
threads would not survive one); the SDK's resource gives each process a `service.instance.id` of its
own, so that the series of a gateway's workers never merge.
"""

from __future__ import annotations

from collections.abc import Callable

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.metrics import Meter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Tracer

from gateway.settings import Settings
from gateway.telemetry.recorder import Telemetry

SCOPE = "gateway"
DEFAULT_SERVICE_NAME = "gateway"


def exporting_telemetry(settings: Settings) -> Telemetry:
    """This process's telemetry, exporting the signals the settings turn on."""
    resource = process_resource()
    closers: list[Callable[[], object]] = []
    tracer: Tracer | None = None
    meter: Meter | None = None
    if settings.otel_traces:
        tracers = TracerProvider(resource=resource)
        tracers.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        tracer = tracers.get_tracer(SCOPE)
        closers.append(tracers.shutdown)
    if settings.otel_metrics:
        reader = PeriodicExportingMetricReader(OTLPMetricExporter())
        meters = MeterProvider(resource=resource, metric_readers=[reader])
        meter = meters.get_meter(SCOPE)
        closers.append(meters.shutdown)

    def shutdown() -> None:
        for close in closers:
            close()

    return Telemetry(tracer, meter, shutdown)


def process_resource() -> Resource:
    """The SDK's resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, this process's instance id),
    named `gateway` when the environment names no service."""
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        return resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    return resource
