"""The batches page in Chromium: a Batch API job over a slow mock upstream, watched as its progress
moves on a page that is never reloaded; then its totals and throughput, and a batch of
`X-Gateway-Batch` requests with its pin."""

from __future__ import annotations

import json
import uuid

import pytest
from playwright.sync_api import Page

from tests.browser.conftest import Shoot, SignIn
from tests.browser.stack import ConsoleStack, wait_until

pytestmark = pytest.mark.e2e

LINES = 8
# Each line waits before its first token and between tokens: about a second a line, one at a time.
SLOW_LINE = {"latency_ms": 600, "chunk_delay_ms": 100, "completion_tokens": 6}


def job_input(count: int) -> bytes:
    lines = [
        {
            "custom_id": f"line-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": "chat",
                "messages": [{"role": "user", "content": f"question {i}"}],
                "mock": SLOW_LINE,
            },
        }
        for i in range(count)
    ]
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def progress(page: Page, job_id: str) -> tuple[int, int]:
    bar = page.locator(f'tr[data-job="{job_id}"] progress')
    return int(bar.get_attribute("data-done") or -1), int(bar.get_attribute("data-total") or -1)


def test_a_running_jobs_progress_moves_on_the_page_by_itself(
    stack: ConsoleStack, sign_in: SignIn, shoot: Shoot
) -> None:
    team = stack.new_team(f"jobs-{uuid.uuid4().hex[:6]}")
    client = stack.client(team.key)
    uploaded = client.files.create(file=("in.jsonl", job_input(LINES)), purpose="batch")
    job = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )

    page = sign_in(team.key)
    page.goto(stack.base_url + "/ui/batches")
    page.evaluate("window.consoleNeverReloaded = true")
    running = f'tr[data-job="{job.id}"][data-status="in_progress"] progress'
    page.wait_for_function(
        "([selector, most]) => { const bar = document.querySelector(selector);"
        " return bar !== null && +bar.dataset.done >= 1 && +bar.dataset.done <= most; }",
        arg=[running, LINES - 3],
    )
    seen, total = progress(page, job.id)
    assert total == LINES
    shoot(page, "batches")
    page.wait_for_function(
        "([selector, seen]) => { const bar = document.querySelector(selector);"
        " return bar !== null && +bar.dataset.done > seen; }",
        arg=[f'tr[data-job="{job.id}"] progress', seen],
    )
    page.wait_for_selector(f'tr[data-job="{job.id}"][data-status="completed"]', timeout=60_000)
    assert progress(page, job.id) == (LINES, LINES)
    assert page.locator(f'tr[data-job="{job.id}"] td[data-field="completed"]').inner_text() == str(LINES)
    assert page.evaluate("window.consoleNeverReloaded") is True, "the rows were swapped in, the page stayed"
    finished = page.locator(f'tr[data-job="{job.id}"]')
    assert finished.locator('td[data-field="deployment"]').inner_text() == "up/upstream-chat"
    throughput = finished.locator('td[data-field="throughput"]').inner_text()
    print("job throughput:", throughput.replace("\n", " "))
    lines_per_s, tokens_per_s = (float(part.split()[0].replace(",", "")) for part in throughput.splitlines())
    assert lines_per_s > 0 and tokens_per_s > 0

    recorded = stack.wait_for_requests(team.id, LINES)
    page.reload()
    row = page.locator(f'#batches-table tr[data-batch="{job.id}"]')
    assert row.locator('td[data-field="requests"]').inner_text() == str(LINES)
    assert (
        row.locator('td[data-field="completion_tokens"]').inner_text() == f"{recorded['completion_tokens']:,}"
    )
    row.locator("a").click()
    page.wait_for_url(f"**/ui/batches/{job.id}")
    assert page.locator('dd[data-field="requests"]').inner_text() == str(LINES)
    assert page.locator('dd[data-field="deployment"]').inner_text() == "up/upstream-chat"
    overall = page.locator("#throughput tbody tr").first
    for rate in ("prefill", "decode"):  # every line was timed: its prefill and decode are apart
        assert float(overall.locator(f'td[data-field="{rate}"]').inner_text().replace(",", "")) > 0
    shoot(page, "batch")


def test_a_batch_of_requests_shows_its_pin_and_totals(stack: ConsoleStack, sign_in: SignIn) -> None:
    team = stack.new_team(f"pinned-{uuid.uuid4().hex[:6]}")
    client = stack.client(team.key)
    batch_id = f"nightly-{uuid.uuid4().hex[:6]}"
    for _ in range(3):
        client.chat.completions.create(
            model="chat-mini",
            messages=[{"role": "user", "content": "hello"}],
            extra_headers={"X-Gateway-Batch": batch_id},
            extra_body={"mock": {"completion_tokens": 7}},
        )
    stack.wait_for_requests(team.id, 3)
    page = sign_in(team.key)
    page.goto(stack.base_url + "/ui/batches")
    row = page.locator(f'#batches-table tr[data-batch="{batch_id}"]')
    wait_until(lambda: row.count() == 1, "the batch listed")
    assert row.locator('td[data-field="requests"]').inner_text() == "3"
    assert row.locator('td[data-field="completion_tokens"]').inner_text() == "21"
    row.locator("a").click()
    page.wait_for_url(f"**/ui/batches/{batch_id}")
    assert page.locator('dd[data-field="deployment"]').inner_text() == "up/upstream-mini"
    assert page.locator('dd[data-field="requests"]').inner_text() == "3"
