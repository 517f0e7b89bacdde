"""Jobs run on their provider's own batch API: a job pinned to a deployment whose provider has
`batch_execution: provider` is submitted whole instead of line by line.

A round submits the job's pending lines as one provider batch, polls it (the job's lease is renewed
meanwhile by the job run), reads its results and stores each line's outcome and usage record, at
the deployment's batch price, through the ledger as the gateway-run lines are. Lines the provider
did not answer (its batch expired or failed, or it failed them itself) are submitted again in the
next round; a cancel or the job's expiry cancels the provider batch and keeps what it finished.
The provider batch in flight is kept in the job's `provider_batch_id` (and its deployment in
`deployment`), so a process that takes the job over polls it instead of submitting the lines
again. The calls to each provider's batch API are `provider_batch_api`'s.

A round is bound by the job's key's and team's budgets through the same limiter as any request:
before its batch is submitted, the estimated cost of its lines (each line's prompt as the gateway
counts it plus the output it allows, at the batch price) is admitted as one reservation; a round
that does not fit is not submitted and the job ends `failed` with `insufficient_quota`. Each line
metered is settled at once, and the round's reservation is released once its results are stored;
while the provider runs it, it is held afresh every third of `limits.reservation_ttl_s`, which a
hold would otherwise not outlive. The budgets are the key's as the runner last read them (every
0.5 s). Rate windows do not bind the round: the provider paces the lines it runs. A revoked or
expired key, or a deleted team, stops the job as a cancel does (the runner sets `cancelled`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import httpx
import structlog
from sqlalchemy import CursorResult, update

from gateway.auth.principal import Principal
from gateway.db.models import BatchJob
from gateway.db.teams import as_utc, utcnow
from gateway.errors import GatewayError, InvalidRequest, QuotaExceeded, RateLimited, ServiceUnavailable
from gateway.jobs import ledger
from gateway.jobs.ledger import Claim, LineOutcome, PendingLine
from gateway.jobs.line_sender import line_cache_key, pacing_s, pause_reason
from gateway.jobs.placement import runs_lines
from gateway.jobs.provider_batch_api import ProviderBatchApi, batch_api_for, chat_call, line_body
from gateway.limits import Admission, Limiter, Reservation
from gateway.limits.holds import HOLD_TTL_S
from gateway.limits.reservation import DEFAULT_MAX_TOKENS
from gateway.limits.spend import MAX_BUDGET_UNITS, units_at_most
from gateway.metering.events import UsageEvent, UsageSource, usage_event
from gateway.metering.pricing import Tariff
from gateway.providers.anthropic.batch_api import ForeignResultsUrl
from gateway.providers.base import Endpoint, TokenUsage, UpstreamCall, estimated_tokens
from gateway.providers.openai.batch_api import LineResult, ProviderBatchError, Submission
from gateway.proxy.request import parse_request
from gateway.routing.deployment import Deployment, DeploymentTable
from gateway.routing.directives import Directives
from gateway.routing.health import HealthBoard
from gateway.routing.pins import PinStore
from gateway.routing.placement import place_batch
from gateway.routing.policy import eligible_deployments

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

    from gateway.settings import Catalog

log = structlog.get_logger("gateway.jobs")
FIRST_POLL_S, MAX_POLL_S = 1.0, 30.0  # a provider batch is read at growing intervals, up to this
# What a provider-run job ends as when a round's estimated cost does not fit its key's or team's
# budget (the runner ends it `failed` with this code, as a key that stops it does).
OVER_BUDGET = QuotaExceeded.code
# A round's reservation is held below this, so that it and a counter fit in 64 bits together.
MAX_ROUND_UNITS = MAX_BUDGET_UNITS // 2


class Admitted(enum.Enum):
    """What admission made of a round: submit it, the job does not fit, or wait and try again."""

    YES = "yes"
    OVER_BUDGET = "over_budget"
    WAIT = "wait"


class _Lost(Exception):
    """Another claim holds the job now: stop without writing anything more."""


def budget_only(principal: Principal) -> Principal:
    """The principal a provider-run job is admitted and settled as: its budgets bind, its rate
    windows do not (the provider paces the lines it runs; one submission is not a minute's
    requests and tokens)."""
    return dataclasses.replace(principal, key_rpm=None, key_tpm=None, team_rpm=None, team_tpm=None)


def batch_tariffs(catalog: Catalog) -> dict[tuple[str, str], Tariff]:
    """Each deployment's batch price, by (model alias, deployment id)."""
    return {
        (model.name, f"{spec.provider}/{spec.model}"): Tariff(spec.price, spec.batch_discount).batch
        for model in catalog.models
        for spec in model.deployments
    }


class ProviderBatches:
    """Places jobs, and runs those placed on a provider-run deployment; owns their HTTP client."""

    def __init__(
        self,
        catalog: Catalog,
        table: DeploymentTable,
        pins: PinStore,
        health: HealthBoard,
        sessions: async_sessionmaker[AsyncSession],
        limiter: Limiter,
        *,
        first_poll_s: float = FIRST_POLL_S,
    ) -> None:
        self._table, self._pins, self._health, self._sessions = table, pins, health, sessions
        self._limiter = limiter
        self._tariffs = batch_tariffs(catalog)
        self._max_messages = catalog.limits.max_messages
        self._default_max_tokens = catalog.limits.default_max_tokens
        self._hold_renew_s = catalog.limits.reservation_ttl_s / 3
        self._pause_s = catalog.jobs.pause_s
        self._first_poll_s = first_poll_s
        self._http: httpx.AsyncClient | None = None

    async def placement(
        self, job: BatchJob, principal: Principal, directives: Directives
    ) -> Deployment | None:
        """The job's deployment if its provider runs the job itself, else None (the gateway runs
        its lines, and their sends report whatever keeps the job from being placed). A job placed
        on a lane the gateway runs (`gateway.jobs.placement`) is run by the gateway."""
        if runs_lines(job):
            return None
        try:
            eligible = eligible_deployments(job.model or "", directives, principal, self._table)
            if not any(d.provider.batch_execution == "provider" for d in eligible):
                return None  # the lines' first send places the pin, as for any batch
            placed = next((d for d in eligible if d.id == job.deployment), None)
            if placed is None:  # placed as its first line's send would place it
                where = await place_batch(
                    self._pins, principal.team_id, job.id, eligible, directives, self._health.open_circuits()
                )
                placed = next((d for d in eligible if d.id == where.deployment), None)
        except GatewayError:
            return None
        return placed if placed is not None and placed.provider.batch_execution == "provider" else None

    async def run(
        self,
        claim: Claim,
        job: BatchJob,
        principal: Principal,
        deployment: Deployment,
        cancelled: asyncio.Event,
        limits: Callable[[], Principal] | None = None,
    ) -> str | None:
        """Run the job's lines on the provider; what ended it (completed, cancelled, expired,
        OVER_BUDGET), or None when the lease was lost. `limits`: the key as last read (its
        budgets may change while the job runs); None: `principal` throughout."""
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=httpx.Timeout(deployment.provider.timeout_s))
        provider_job = ProviderJob(
            claim=claim,
            job=job,
            principal=principal,
            limits=limits,
            deployment=deployment,
            tariff=self._tariffs[(deployment.model, deployment.id)],
            api=batch_api_for(self._http, deployment.provider),
            sessions=self._sessions,
            cancelled=cancelled,
            limiter=self._limiter,
            max_messages=self._max_messages,
            default_max_tokens=self._default_max_tokens,
            hold_renew_s=self._hold_renew_s,
            pause_s=self._pause_s,
            first_poll_s=self._first_poll_s,
        )
        try:
            return await provider_job.run()
        except _Lost:
            return None

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None


@dataclass
class ProviderJob:
    """One claimed job, run on its provider's batch API until no line is pending or it ends."""

    claim: Claim
    job: BatchJob
    principal: Principal
    limits: Callable[[], Principal] | None  # the key's limits as last read, when they are read
    deployment: Deployment
    tariff: Tariff  # the deployment's batch price
    api: ProviderBatchApi
    sessions: async_sessionmaker[AsyncSession]
    cancelled: asyncio.Event
    limiter: Limiter
    max_messages: int
    pause_s: float
    first_poll_s: float = FIRST_POLL_S
    default_max_tokens: int = DEFAULT_MAX_TOKENS  # a line's output when it sets no max tokens
    # each pending line's estimate: its prompt as the gateway counts it, and the output it allows
    estimates: dict[int, TokenUsage] = dataclasses.field(default_factory=dict)
    held: Admission | None = None  # the reservation of the round in flight, while it is held
    held_at: float = 0.0  # when it was (last) admitted, on the monotonic clock
    hold_renew_s: float = HOLD_TTL_S / 3  # how often it is held afresh, within a hold's lifetime

    def _bound(self) -> Principal:
        """The key as its budgets bind the job now, without its rate windows (`budget_only`)."""
        return budget_only(self.limits() if self.limits is not None else self.principal)

    def _ending(self) -> str | None:
        if self.cancelled.is_set():
            return "cancelled"
        return "expired" if utcnow() >= as_utc(self.job.expires_at) else None

    async def run(self) -> str:
        try:
            return await self._rounds()
        finally:
            await self._release()  # the lease was lost, or the job ended with a round held

    async def _rounds(self) -> str:
        batch_id = self.job.provider_batch_id
        await self._remember(batch_id)
        while True:
            ending = self._ending()
            if batch_id is None and ending is not None:
                return ending
            async with self.sessions() as session:
                lines = await ledger.pending_lines(session, self.job.id)
            if not lines:
                return "completed"
            submissions = await self._submissions(lines)
            if not submissions:
                continue  # every pending line was refused before it could be sent
            stored = 0
            if batch_id is None:
                admitted = await self._admit(submissions)
                if admitted is Admitted.OVER_BUDGET:
                    return OVER_BUDGET
                if admitted is Admitted.WAIT:
                    continue
            try:
                if batch_id is None:
                    batch_id = await self.api.submit(submissions)
                    await self._remember(batch_id)
                    log.info("provider_batch_submitted", batch=self.job.id, provider_batch=batch_id,
                             lines=len(submissions))  # fmt: skip
                stored = await self._follow(batch_id, {s.line_no: s.call for s in submissions})
                batch_id = None
                await self._remember(None)
                await self._release()  # its lines are settled: what is left of it goes back
            except ProviderBatchError as exc:
                if batch_id is None:  # not submitted: the next round is admitted afresh
                    await self._release()
                if isinstance(exc, ForeignResultsUrl) and (ending := self._ending()) is not None:
                    # Results that cannot be read never will be: the job ends with what it has.
                    log.warning("provider_batch_abandoned", batch=self.job.id, reason=str(exc))
                    return ending
                await self._pause(f"provider batch API failing: {exc}")
                continue
            if stored == 0 and self._ending() is None:
                await self._pause("the provider batch ended with no line answered")

    async def _submissions(self, lines: list[PendingLine]) -> list[Submission]:
        """The pending lines as the provider is to run them; a line the gateway cannot send is
        stored at once as refused (never sent: nothing to meter), as a gateway-run line is."""
        submissions = []
        for line in lines:
            request_id = f"{self.job.id}-{line.line_no}"
            try:
                submissions.append(self._submission(line))
            except GatewayError as exc:
                refused = LineOutcome(
                    line.line_no, ledger.FAILED, exc.status, exc.to_json().decode(), request_id, 0
                )
                await self._record(refused, None)
        return submissions

    def _submission(self, line: PendingLine) -> Submission:
        parsed = parse_request(line.body.encode(), Endpoint.CHAT, self.max_messages)
        if parsed.stream:
            raise InvalidRequest("A batch request cannot stream", param="stream")
        team_id = self.principal.team_id
        cache_key = line_cache_key(team_id, parsed, line.prefix_key) or parsed.prompt_cache_key
        call = chat_call(parsed.body, self.deployment.upstream_model, team_id, parsed.chat, cache_key)
        per_choice = self.default_max_tokens if parsed.max_output_tokens is None else parsed.max_output_tokens
        self.estimates[line.line_no] = TokenUsage(
            prompt_tokens=parsed.prompt_size().tokens,
            completion_tokens=max(per_choice, 0) * max(parsed.choices, 1),
        )
        return Submission(line.line_no, call, line_body(call, self.deployment.provider))

    def _reservation(self, submissions: list[Submission]) -> Reservation:
        """What a round may cost at most: each line's estimate at the batch price, rounded up."""
        usages = [self.estimates[s.line_no] for s in submissions]
        units = sum(units_at_most(self.tariff.cost(usage)) for usage in usages)
        tokens = sum(usage.prompt_tokens + usage.completion_tokens for usage in usages)
        return Reservation(tokens=tokens, units=min(units, MAX_ROUND_UNITS))

    async def _admit(self, submissions: list[Submission]) -> Admitted:
        """Hold the round's estimated cost against the key's and team's budgets before it is
        submitted, as the proxy holds a request's (the same limiter, the same rule)."""
        principal = self._bound()
        if principal.unlimited:
            return Admitted.YES  # no budget binds: nothing to hold back, the settles still count
        try:
            self.held = await self.limiter.admit(principal, self._reservation(submissions))
            self.held_at = time.monotonic()
        except QuotaExceeded as exc:  # the round does not fit what is left: it is not submitted
            log.warning("provider_batch_over_budget", batch=self.job.id, lines=len(submissions),
                        reason=exc.message)  # fmt: skip
            return Admitted.OVER_BUDGET
        except RateLimited as exc:  # the budget is held by requests in flight: wait for them
            await self._rest(pacing_s(exc) or 1.0)
            return Admitted.WAIT
        except ServiceUnavailable as exc:  # a budget's counter cannot be rebuilt: wait for it
            await self._pause(pause_reason(exc))
            return Admitted.WAIT
        return Admitted.YES

    async def _renew(self) -> None:
        """Hold the round's reservation afresh before the limiter lets it lapse (a hold lives
        `limits.reservation_ttl_s`; a provider batch may run for hours). When the budget has no
        more room for it (other requests of the team took it meanwhile), the round goes on unheld:
        its lines are with the provider already, and each still settles as it is stored."""
        if self.held is None or time.monotonic() - self.held_at < self.hold_renew_s:
            return
        reservation = self.held.reservation
        await self._release()
        try:
            self.held = await self.limiter.admit(self._bound(), reservation)
            self.held_at = time.monotonic()
        except Exception as exc:  # refused (the budget has no room), or the limiter failed
            log.warning("provider_batch_unheld", batch=self.job.id, error=type(exc).__name__)

    async def _settle(self, event: UsageEvent) -> None:
        """A metered line settles the key's and team's spend counters at once, as any request's
        record does; the round's reservation stays held until its last line is stored. Counters
        lost here are rebuilt from the records, so a limiter that fails fails nothing else."""
        try:
            await self.limiter.settle(self._bound(), event, None)
        except Exception as exc:
            log.warning("batch_line_settle_failed", batch=self.job.id, error=type(exc).__name__)

    async def _release(self) -> None:
        """Give back what is left held of the round's reservation (once: then none is held)."""
        held, self.held = self.held, None
        if held is None:
            return
        try:
            await self.limiter.release(self._bound(), held)
        except Exception as exc:  # the hold expires on its own
            log.warning("provider_batch_release_failed", batch=self.job.id, error=type(exc).__name__)

    async def _follow(self, batch_id: str, calls: dict[int, UpstreamCall]) -> int:
        """Poll the provider batch until it ends (cancelling it on a cancel or the job's expiry),
        then store its results; how many lines it answered."""
        delay, cancel_sent = self.first_poll_s, False
        submitted_at = time.time()
        while not (state := await self.api.state(batch_id)).ended:
            if self._ending() is not None and not cancel_sent:
                await self.api.cancel(batch_id)
                cancel_sent = True
                continue
            await self._rest(min(delay, self.hold_renew_s))
            await self._renew()
            delay = min(delay * 2, MAX_POLL_S)
        results = {result.line_no: result for result in await self.api.results(state, calls)}
        for result in results.values():
            outcome, event = self._outcome(result, submitted_at)
            await self._record(outcome, event)
            await self._settle(event)
        log.info("provider_batch_ended", batch=self.job.id, provider_batch=batch_id, answered=len(results))
        return len(results)

    def _outcome(self, result: LineResult, submitted_at: float) -> tuple[LineOutcome, UsageEvent]:
        request_id = f"{self.job.id}-{result.line_no}"
        if result.response is None:
            assert result.error is not None
            error = result.error
            refused = LineOutcome(
                result.line_no, ledger.FAILED, error.status, error.to_json().decode(), request_id, 1
            )
            return refused, self._event(request_id, submitted_at, error.status, None, error.code)
        body = result.response.body.decode()
        done = LineOutcome(result.line_no, ledger.SUCCEEDED, 200, body, request_id, 1)
        usage = result.response.usage
        if usage is None:  # counts not reported, or not believed: the gateway's own estimate,
            # the prompt counted from the line's body as for any request without upstream counts
            estimate = TokenUsage(
                prompt_tokens=self.estimates[result.line_no].prompt_tokens,
                completion_tokens=estimated_tokens(len(result.response.body)),
            )
            return done, self._event(request_id, submitted_at, 200, estimate, None, UsageSource.ESTIMATED)
        return done, self._event(request_id, submitted_at, 200, usage, None, UsageSource.UPSTREAM)

    def _event(
        self,
        request_id: str,
        submitted_at: float,
        status: int,
        usage: TokenUsage | None,
        error_code: str | None,
        source: UsageSource = UsageSource.NONE,
    ) -> UsageEvent:
        return usage_event(
            request_id,
            created_at=submitted_at,
            team_id=self.principal.team_id,
            key_id=self.principal.key_id,
            deployment=self.deployment,
            endpoint=Endpoint.CHAT.value,
            status=status,
            usage=usage,
            source=source,
            tariff=self.tariff,
            batch_id=self.job.id,
            latency_ms=round((time.time() - submitted_at) * 1000, 3),
            error_code=error_code,
        )

    async def _record(self, outcome: LineOutcome, event: UsageEvent | None) -> None:
        async with self.sessions() as session:
            if not await ledger.record_outcome(session, self.claim, outcome, event, utcnow()):
                raise _Lost(self.claim.job_id)  # the line was pending when the round began

    async def _remember(self, batch_id: str | None) -> None:
        """Keep the deployment and the provider batch in flight (None: none) on the job."""
        statement = (
            update(BatchJob)
            .where(BatchJob.id == self.claim.job_id, BatchJob.fencing_token == self.claim.fencing_token)
            .values(provider_batch_id=batch_id, deployment=self.deployment.id)
            .execution_options(synchronize_session=False)
        )
        async with self.sessions() as session:
            result = await session.execute(statement)
            await session.commit()
        if cast(CursorResult[Any], result).rowcount != 1:
            raise _Lost(self.claim.job_id)
        self.job.provider_batch_id = batch_id

    async def _pause(self, reason: str) -> None:
        async with self.sessions() as session:
            if not await ledger.set_paused(session, self.claim, reason[:200]):
                raise _Lost(self.claim.job_id)
        log.warning("batch_paused", batch=self.job.id, reason=reason, pause_s=self.pause_s)
        await self._rest(self.pause_s)

    async def _rest(self, seconds: float) -> None:
        """Wait `seconds`, or until a cancel (once cancelled, the whole time: the provider batch
        is being cancelled, and reading it faster would not end it sooner)."""
        if self.cancelled.is_set():
            await asyncio.sleep(seconds)
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self.cancelled.wait()
