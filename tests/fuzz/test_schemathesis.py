"""Schemathesis against the OpenAPI document a real `gateway serve` serves (`/schema/openapi.json`).

The gateway runs as `gateway serve` does in production (uvicorn, one worker) on the embedded default
config (the built-in `mock` providers, a SQLite file, no Redis), with a team made through the admin
API. Schemathesis loads the document over HTTP (`schemathesis.openapi.from_url`) and runs its own
engine, as `st run` does, over every operation: the examples, coverage (boundary values, every
documented enum, missing and wrong-typed inputs, methods the path does not take) and fuzzing
phases, and the stateful phase over the links it infers. It authenticates each operation with the
key its `security` names: the team key (as a bearer token, and as `x-api-key` on the Messages API)
and the admin key on `/admin`.

Checks, all that apply:

- `not_a_server_error`: no 5xx.
- `status_code_conformance`, `content_type_conformance`, `response_schema_conformance`,
  `response_headers_conformance`: every answer is one the document describes.
- `positive_data_acceptance`: a request the document calls valid is not refused as invalid (any
  4xx but 401/403/404/409/429). Not on `POST /v1/messages` and `POST /v1/responses`, where what is
  valid depends on the provider that serves the model (SPEC 2: a translated provider refuses what
  it cannot honour, such as a content block of a kind chat has not, or a Responses request without
  `input`); not on `POST /admin/keys`, which refuses an `expires_at` already past (the document
  cannot say "in the future"), nor on `GET /admin/usage/events`, whose `cursor` is opaque: only
  one the API returned is valid, and any other is a 400; nor on `POST /v1/gateway/batches/quote`,
  whose inline lines must agree with each other (one model, each custom_id once), which a schema
  cannot state.
- `negative_data_rejection`: a request the document calls invalid is refused; not on the file
  upload, whose multipart form carries text only (a "wrong type", 5 for "batch", arrives as text).
- `missing_required_header`, `unsupported_method`, `allow_header_conformance`: a method the path
  does not take is a 405 whose `Allow` lists the documented ones, and `OPTIONS` answers the same.
- `ignored_auth`: an operation that names a key refuses a request without one.
- `use_after_free`, `ensure_resource_availability`, `object_level_authorization`: the stateful
  phase's checks over created teams, keys, files and batches.

Left out: `max_response_time`, a timing assertion on a shared 2-core machine.

Two rules the document cannot state are applied to the generated cases (`as_the_gateway_reads`):
integers sent as integers, and directives given both ways made to agree.

Bounded in time: FUZZ_EXAMPLES examples per operation and phase (default 10: about a minute on an
idle 2-core machine, a few minutes on a busy one; schemathesis' own `max-time` is left unset, as it
keeps fuzzing until that time); FUZZ_SEED fixes the run (default: a fixed seed, printed, so a
failure replays exactly).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import schemathesis
from schemathesis import GenerationMode
from schemathesis.checks import CHECKS as REGISTRY
from schemathesis.checks import load_all_checks
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import events, from_schema

from gateway.api.openapi import ADMIN_KEY, TEAM_KEY, TEAM_KEY_HEADER
from tests.fuzz.stack import ADMIN_KEY as ADMIN_SECRET
from tests.fuzz.stack import ServedStack, served_gateway

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "10"))
SEED = int(os.environ.get("FUZZ_SEED", "20261203"))
# A safety net well past the default run (schemathesis' own `max-time` would keep it fuzzing until then)
TIMEOUT_S = 900
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "response_headers_conformance",
    "positive_data_acceptance",
    "negative_data_rejection",
    "missing_required_header",
    "unsupported_method",
    "allow_header_conformance",
    "ignored_auth",
    "use_after_free",
    "ensure_resource_availability",
    "object_level_authorization",
)

pytestmark = pytest.mark.timeout(TIMEOUT_S)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedStack]:
    with served_gateway(tmp_path_factory.mktemp("schemathesis")) as stack:
        yield stack


def _without(method: str, path: str, check: str) -> dict[str, Any]:
    return {"include-path": path, "include-method": method, "checks": {check: {"enabled": False}}}


def run_config(stack: ServedStack, skipped: str) -> SchemathesisConfig:
    """What `schemathesis.toml` would say for a run of the operations whose path does not match
    `skipped`."""
    return SchemathesisConfig.from_dict(
        {
            "seed": SEED,
            "generation": {"max-examples": EXAMPLES, "database": "none"},
            "phases": {name: {"enabled": True} for name in ("examples", "coverage", "fuzzing", "stateful")},
            "checks": {name: {"enabled": True} for name in CHECKS},  # max_response_time: unset, off
            "operations": [  # the exceptions the module docstring gives reasons for
                _without("POST", "/v1/files", "negative_data_rejection"),
                _without("POST", "/v1/messages", "positive_data_acceptance"),
                _without("POST", "/v1/responses", "positive_data_acceptance"),
                _without("POST", "/admin/keys", "positive_data_acceptance"),
                _without("GET", "/admin/usage/events", "positive_data_acceptance"),
                _without("POST", "/v1/gateway/batches/quote", "positive_data_acceptance"),
                {"include-path-regex": skipped, "enabled": False},
            ],
            "auth": {
                "openapi": {
                    TEAM_KEY: {"bearer": stack.team_key},
                    TEAM_KEY_HEADER: {"api_key": stack.team_key},
                    ADMIN_KEY: {"bearer": ADMIN_SECRET},
                }
            },
        }
    )


DIRECTIVE_FIELDS = {
    "X-Gateway-Batch": "batch",
    "X-Gateway-Region": "region",
    "X-Gateway-Provider": "provider",
    "X-Gateway-Fallback": "fallback",
    "X-Gateway-Cache-Key": "cache_key",
}


def as_the_gateway_reads(context: Any, case: schemathesis.Case) -> schemathesis.Case:
    """Two rules the document cannot state. Schemathesis spells some integers as whole floats
    (`2.0`), which JSON Schema counts as integers; OpenAI's API refuses them ("expected an integer,
    but got a decimal number") and so does the gateway, so they are sent as integers (the same
    number, in the same validity class). And a directive given both as a header and in the body
    must agree (SPEC 3: a 400 otherwise), a rule between two parameters: a valid case keeps the
    body's."""
    if case.body is not None and not isinstance(case.body, (bytes, str)):
        case.body = _whole_floats_as_integers(case.body)
    directives = case.body.get("gateway") if isinstance(case.body, dict) else None
    if case.meta is None or case.meta.generation.mode is not GenerationMode.POSITIVE:
        return case
    if isinstance(directives, dict) and case.headers:
        for header, field in DIRECTIVE_FIELDS.items():
            if field in directives:
                case.headers.pop(header, None)
    return case


def _whole_floats_as_integers(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _whole_floats_as_integers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_whole_floats_as_integers(item) for item in value]
    return value


def _failures(recorder: Any) -> list[str]:
    found = []
    for case_id, checks in recorder.checks.items():
        for check in checks:
            if check.failure_info is None:
                continue
            failure, answer = check.failure_info.failure, recorder.interactions.get(case_id)
            response = answer.response if answer is not None else None
            shown = (
                "" if response is None else f"[{response.status_code}] {(response.content or b'')[:400]!r}"
            )
            found.append(
                f"{recorder.label} [{check.name}] {failure.title}\n{failure.message}\n    {shown}\n"
                f"    {check.failure_info.code_sample}  (case {case_id})"
            )
    return found


@dataclass
class Outcome:
    operations: int = 0
    failures: dict[str, str] = field(default_factory=dict)  # one report per distinct failure
    errors: list[str] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    stopped: list[str] = field(default_factory=list)


def run(stack: ServedStack, skipped: str, outcome: Outcome) -> None:
    """Schemathesis' engine over the operations whose path does not match `skipped`."""
    url = f"{stack.base_url}/schema/openapi.json"
    schema = schemathesis.openapi.from_url(url, config=run_config(stack, skipped))
    schema.hook("map_case")(as_the_gateway_reads)
    outcome.operations += sum(1 for _ in schema.get_all_operations())
    for event in from_schema(schema).execute():
        if isinstance(event, (events.ScenarioFinished, events.FuzzScenarioFinished)):
            for interaction in event.recorder.interactions.values():
                if interaction.response is not None:
                    outcome.statuses[interaction.response.status_code] += 1
            for failure in _failures(event.recorder):
                outcome.failures.setdefault("\n".join(failure.split("\n", 2)[:2]), failure)
        elif isinstance(event, events.NonFatalError):
            outcome.errors.append(f"{event.label}: {event.info.format()}")
        elif isinstance(event, events.FatalError):
            outcome.errors.append(f"fatal: {event.exception!r}")
        elif isinstance(event, events.PhaseFinished):
            print(f"schemathesis: {event.phase.name.value} done, {outcome.statuses.total()} requests so far")
        elif isinstance(event, events.EngineFinished):
            outcome.stopped.append(event.stop_reason.value)


def test_the_served_document_holds_for_every_operation(served: ServedStack) -> None:
    outcome = Outcome()
    started = time.monotonic()
    # The team's own operations first: fuzzing the admin API revokes keys and deletes teams.
    run(served, "^/admin", outcome)
    run(served, "^/(?!admin)", outcome)
    print(
        f"schemathesis (seed {SEED}, {EXAMPLES} examples): {outcome.operations} operations, "
        f"{outcome.statuses.total()} requests in {time.monotonic() - started:.0f} s, "
        f"statuses {dict(sorted(outcome.statuses.items()))}"
    )
    assert outcome.operations >= 30  # the document really lists the surface
    assert not outcome.errors, "\n\n".join(outcome.errors)
    assert not outcome.failures, f"{len(outcome.failures)} failures:\n\n" + "\n\n".join(
        outcome.failures.values()
    )
    assert outcome.statuses[500] == 0
    assert outcome.statuses[200] > 0 and outcome.statuses[400] > 0  # valid and invalid requests got through
    assert set(outcome.stopped) == {"completed"}, f"a run stopped early: {outcome.stopped}"


def test_the_checks_named_are_all_schemathesis_has() -> None:
    """A check added to schemathesis is a decision to make here, not one skipped silently."""
    load_all_checks()
    assert set(REGISTRY.get_all_names()) == set(CHECKS)
