"""A job created in a process is claimed there at once, not at the runner's next poll: the poll's
wait would leave every slot of the job's deployment idle (SPEC section 8, "Goodput")."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from gateway.jobs.runner import JobRunner
from tests.integration.jobs.conftest import (
    JOBS,
    MOCK,
    Owner,
    ServicesFactory,
    add_job,
    catalog_with,
    chat_body,
)
from tests.integration.jobs.test_runner_postgres import FINAL, eventually, running, status_is

pytestmark = pytest.mark.integration
POLL_S = 3600.0  # far beyond the test's deadline: only the wake-up can start the job in time


async def test_a_job_created_here_is_claimed_without_waiting_for_the_poll(
    make_services: ServicesFactory, owner: Owner
) -> None:
    services = make_services(catalog_with(MOCK, msgspec.structs.replace(JOBS, poll_interval_s=POLL_S)))
    runner = JobRunner(services, owner="here")
    services.job_runner = runner
    async with running(runner):
        await asyncio.sleep(0.2)  # its first look found nothing: it now waits for its poll
        job_id = await add_job(services.sessions, owner, [chat_body(n) for n in range(4)])
        services.job_created()  # what POST /v1/batches and /v1/messages/batches do once committed
        await eventually(lambda: status_is(services.sessions, job_id, *FINAL), timeout_s=20)
