"""The directives a job's lines carry."""

from __future__ import annotations

from datetime import UTC, datetime

from gateway.db.models import BatchJob
from gateway.jobs.runner import job_directives
from gateway.routing.directives import Priority


def job(directives: dict[str, str] | None) -> BatchJob:
    now = datetime.now(UTC)
    return BatchJob(
        id="batch_1", team_id="t", key_id="k", directives=directives, created_at=now, expires_at=now
    )


def test_a_jobs_lines_carry_its_batch_id_at_batch_priority_with_its_directives() -> None:
    directives = job_directives(job({"region": "eu", "provider": "vllm-a, vllm-b"}))
    assert directives.batch == "batch_1" and directives.priority is Priority.BATCH
    assert (directives.region, directives.providers) == ("eu", ("vllm-a", "vllm-b"))
    bare = job_directives(job(None))
    assert (bare.batch, bare.region, bare.providers) == ("batch_1", None, ())
