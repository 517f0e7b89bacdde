"""What admission reserves for a request until it is metered: tokens, and cost at the most.

Tokens: ~4 bytes of body a prompt token, plus the output the request allows (`max_completion_tokens`
or `max_tokens`, times `n`; `limits.default_max_tokens` a choice when it sets neither). Cost: those
tokens at the prices of the alias's most expensive deployment, since the route is chosen after
admission; the settle replaces both by what the request really used.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.limits.spend import MAX_REQUEST_UNITS, units_at_most
from gateway.metering.pricing import Tariff
from gateway.providers.base import TokenUsage, estimated_tokens
from gateway.routing.deployment import DeploymentTable

DEFAULT_MAX_TOKENS = 4096


@dataclass(frozen=True, slots=True)
class Reservation:
    """Tokens charged to the token windows and cost (1e-10 USD) held against the budgets."""

    tokens: int = 0
    units: int = 0


class Reservations:
    """Prices reservations with the catalog's deployments (built once, with the table)."""

    def __init__(self, table: DeploymentTable, default_max_tokens: int = DEFAULT_MAX_TOKENS) -> None:
        self._tariffs: dict[str, tuple[Tariff, ...]] = {
            model: tuple(d.tariff for d in deployments) for model, deployments in table.by_model.items()
        }
        self.default_max_tokens = default_max_tokens

    def for_request(
        self, model: str, body_bytes: int, max_output_tokens: int | None, choices: int = 1
    ) -> Reservation:
        """`max_output_tokens`: what the request allows a choice (None: unset, so the default)."""
        return self.priced(model, self.tokens(body_bytes, max_output_tokens, choices))

    def priced(self, model: str, usage: TokenUsage, service_tier: str | None = None) -> Reservation:
        """The reservation for what a request may use (`tokens`), at the alias's dearest price: the
        tier it asks (priority may cost more than the default) or the default, which a request for
        a cheaper tier may be served at instead."""
        # An unknown alias reserves no cost: routing refuses it before any upstream is reached.
        tariffs = self._tariffs.get(model, ())
        costs = [max(t.cost(usage), t.tier(service_tier).cost(usage)) for t in tariffs]
        units = units_at_most(max(costs)) if costs else 0
        return Reservation(
            tokens=usage.prompt_tokens + usage.completion_tokens, units=min(units, MAX_REQUEST_UNITS)
        )

    def tokens(self, body_bytes: int, max_output_tokens: int | None, choices: int = 1) -> TokenUsage:
        """The prompt (~4 bytes of the whole JSON body a token: a bound on it) and the most output
        the request allows: what it may use, before it has used anything."""
        per_choice = self.default_max_tokens if max_output_tokens is None else max_output_tokens
        output = max(per_choice, 0) * max(choices, 1)
        return TokenUsage(prompt_tokens=estimated_tokens(body_bytes), completion_tokens=output)
