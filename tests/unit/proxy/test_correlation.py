"""The client's own ids: X-Request-ID kept when it is 1-128 printable ASCII characters, a W3C
traceparent (and its tracestate) forwarded only when valid."""

from __future__ import annotations

import pytest

from gateway.proxy.correlation import NO_CORRELATION, Correlation, read_correlation

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


def test_no_headers_no_correlation() -> None:
    assert read_correlation({}) is NO_CORRELATION
    assert read_correlation({"x-other": "1"}) == Correlation()


@pytest.mark.parametrize("request_id", ["a", "job-17/line 3", "~" * 128, "order:#42 (retry)"])
def test_a_printable_request_id_is_kept_as_sent(request_id: str) -> None:
    assert read_correlation({"x-request-id": request_id}) == Correlation(client_request_id=request_id)


@pytest.mark.parametrize("request_id", ["", "x" * 129, "line\nbreak", "tab\there", "caf\u00e9", "nul\x00"])
def test_any_other_request_id_is_ignored(request_id: str) -> None:
    assert read_correlation({"x-request-id": request_id}).client_request_id is None


def test_a_valid_traceparent_is_forwarded_with_its_tracestate() -> None:
    correlation = read_correlation(
        {
            "traceparent": TRACEPARENT,
            "tracestate": "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7",
            "x-request-id": "r1",
        }
    )
    assert correlation == Correlation(
        client_request_id="r1",
        trace_id=TRACE_ID,
        upstream_headers={
            "traceparent": TRACEPARENT,
            "tracestate": "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7",
        },
    )


def test_a_later_version_may_carry_more_fields() -> None:
    later = f"cc-{TRACE_ID}-00f067aa0ba902b7-09-what-comes-next"
    assert read_correlation({"traceparent": later}).upstream_headers == {"traceparent": later}


@pytest.mark.parametrize(
    "traceparent",
    [
        "",
        "garbage",
        TRACEPARENT.upper(),  # hex is lower-case
        f"ff-{TRACE_ID}-00f067aa0ba902b7-01",  # version ff is forbidden
        f"00-{TRACE_ID}-00f067aa0ba902b7-01-extra",  # version 00 has exactly four fields
        f"00-{'0' * 32}-00f067aa0ba902b7-01",  # all-zero trace id
        f"00-{TRACE_ID}-{'0' * 16}-01",  # all-zero parent id
        f"00-{TRACE_ID[:-1]}-00f067aa0ba902b7-01",  # a field too short
        f"00-{TRACE_ID}-00f067aa0ba902b7-1",
        f"0-{TRACE_ID}-00f067aa0ba902b7-01",
        f" {TRACEPARENT}",
        f"cc-{TRACE_ID}-00f067aa0ba902b7-01x",  # a later version's extra fields follow a dash
    ],
)
def test_an_invalid_traceparent_is_dropped_with_its_tracestate(traceparent: str) -> None:
    correlation = read_correlation({"traceparent": traceparent, "tracestate": "rojo=1", "x-request-id": "r"})
    assert correlation == Correlation(client_request_id="r")


@pytest.mark.parametrize("tracestate", ["a=" + "x" * 511, ",".join(f"k{i}=v" for i in range(33)), "a=\n"])
def test_a_tracestate_too_long_or_unprintable_is_not_forwarded(tracestate: str) -> None:
    correlation = read_correlation({"traceparent": TRACEPARENT, "tracestate": tracestate})
    assert correlation.upstream_headers == {"traceparent": TRACEPARENT}
    assert correlation.trace_id == TRACE_ID
