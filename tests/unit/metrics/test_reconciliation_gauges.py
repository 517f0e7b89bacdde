"""/metrics shows each provider's latest reconciled day: the share and size of each difference."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

from gateway.metrics.instruments import Metrics
from gateway.reconciliation.comparison import Finding, Measure


def finding(model: str, measure: Measure, gateway: int, reported: int) -> Finding:
    share = (reported - gateway) / max(gateway, reported)
    return Finding(date(2026, 12, 3), "openai", model, "default", measure, Decimal(gateway),
                   Decimal(reported), Decimal(reported - gateway), share, abs(share) > 0.01)  # fmt: skip


def test_the_latest_findings_are_the_gauges() -> None:
    metrics = Metrics()
    metrics.show_reconciliation([finding("old", Measure.INPUT, 1, 1)])
    metrics.show_reconciliation(
        [finding("m", Measure.INPUT, 900, 1000), finding("m", Measure.OUTPUT, 10, 10)]
    )
    text = metrics.render().decode()
    labels = 'measure="input",model="m",provider="openai",tier="default"'
    assert f"gateway_reconciliation_difference_ratio{{{labels}}} 0.1" in text
    assert f"gateway_reconciliation_difference{{{labels}}} 100.0" in text
    assert 'gateway_reconciliation_day_timestamp_seconds{provider="openai"} 1.796256e+09' in text
    assert 'model="old"' not in text  # replaced, not kept beside
