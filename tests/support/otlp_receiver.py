"""An OTLP/HTTP receiver for the tests: what an OpenTelemetry collector hears from the gateway.

A small HTTP server on a free port that takes `POST /v1/traces` and `POST /v1/metrics` as the
collector protocol sends them (protobuf, gzip or not), decodes each with the OpenTelemetry protobufs
(`ExportTraceServiceRequest`, `ExportMetricsServiceRequest`) and keeps what it decoded:

    with OtlpReceiver() as receiver:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}
        ...
        span = receiver.wait_for_span(lambda s: s.attributes.get("gateway.request.id") == request_id)
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from google.protobuf.message import Message
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from tests.support.servers import free_port

SPAN_KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}


def value_of(value: AnyValue) -> Any:
    """An attribute's value as Python has it (arrays as lists)."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [value_of(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return attributes_of(value.kvlist_value.values)
    return getattr(value, kind)


def attributes_of(pairs: Any) -> dict[str, Any]:
    return {pair.key: value_of(pair.value) for pair in pairs if isinstance(pair, KeyValue)}


@dataclass(frozen=True)
class Event:
    name: str
    attributes: dict[str, Any]


@dataclass(frozen=True)
class Span:
    """One exported span, decoded: ids as lower-case hex, as a traceparent writes them."""

    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    events: tuple[Event, ...]
    status: int  # 0 unset, 1 ok, 2 error
    resource: dict[str, Any]
    scope: str


@dataclass(frozen=True)
class Point:
    """One data point of an exported metric: a histogram's count and sum, or a sum/gauge's value."""

    metric: str
    kind: str  # histogram, sum, gauge
    attributes: dict[str, Any]
    count: int = 0
    total: float = 0.0
    resource: dict[str, Any] = field(default_factory=dict)


def _spans(request: ExportTraceServiceRequest) -> list[Span]:
    spans = []
    for resource_spans in request.resource_spans:
        resource = attributes_of(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    Span(
                        name=span.name,
                        kind=SPAN_KINDS[span.kind],
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        attributes=attributes_of(span.attributes),
                        events=tuple(Event(e.name, attributes_of(e.attributes)) for e in span.events),
                        status=span.status.code,
                        resource=resource,
                        scope=scope_spans.scope.name,
                    )
                )
    return spans


def _points(request: ExportMetricsServiceRequest) -> list[Point]:
    points = []
    for resource_metrics in request.resource_metrics:
        resource = attributes_of(resource_metrics.resource.attributes)
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                kind = metric.WhichOneof("data")
                if kind == "histogram":
                    points += [
                        Point(metric.name, kind, attributes_of(p.attributes), p.count, p.sum, resource)
                        for p in metric.histogram.data_points
                    ]
                elif kind in ("sum", "gauge"):
                    data = getattr(metric, kind)
                    points += [
                        Point(
                            metric.name,
                            kind,
                            attributes_of(p.attributes),
                            1,
                            p.as_double or p.as_int,
                            resource,
                        )
                        for p in data.data_points
                    ]
    return points


class OtlpReceiver:
    """The collector's OTLP/HTTP endpoint, in a thread of the test process."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._lock = threading.Lock()
        self._spans: list[Span] = []
        self._exports: list[list[Point]] = []  # one list per metrics export, in arrival order
        self.raw: list[bytes] = []  # every decoded request body, for searches through all of it
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                reply: Message
                if self.path == "/v1/traces":
                    traces = ExportTraceServiceRequest.FromString(body)
                    with receiver._lock:
                        receiver._spans += _spans(traces)
                        receiver.raw.append(body)
                    reply = ExportTraceServiceResponse()
                elif self.path == "/v1/metrics":
                    metrics = ExportMetricsServiceRequest.FromString(body)
                    with receiver._lock:
                        receiver._exports.append(_points(metrics))
                        receiver.raw.append(body)
                    reply = ExportMetricsServiceResponse()
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                payload = reply.SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()

    def spans(self) -> list[Span]:
        with self._lock:
            return list(self._spans)

    def wait_for_spans(
        self, match: Callable[[Span], bool], count: int = 1, timeout_s: float = 15.0
    ) -> list[Span]:
        """The spans that `match`, once there are `count` of them (or what there is after the wait)."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = [span for span in self.spans() if match(span)]
            if len(found) >= count or time.monotonic() > deadline:
                return found
            time.sleep(0.05)

    def latest_points(self, metric: str) -> list[Point]:
        """The data points of `metric` in the latest export that has it (exports are cumulative)."""
        with self._lock:
            exports = list(self._exports)
        for points in reversed(exports):
            found = [p for p in points if p.metric == metric]
            if found:
                return found
        return []

    def wait_for_points(
        self, metric: str, ready: Callable[[list[Point]], bool], timeout_s: float = 15.0
    ) -> list[Point]:
        deadline = time.monotonic() + timeout_s
        while True:
            points = self.latest_points(metric)
            if ready(points) or time.monotonic() > deadline:
                return points
            time.sleep(0.1)
