"""A serving process tunes its garbage collector once started; an app built for tests does not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gateway.server.gc_tuning import (
    MIDDLE_COLLECTIONS_PER_OLD,
    YOUNG_ALLOCATIONS,
    YOUNG_COLLECTIONS_PER_MIDDLE,
)
from tests.support.gateway import REPO

# Runs in a child: the tuning changes the process's collector for good.
_PROBE = """
import gc, json, os, sys
from litestar.testing import TestClient
from gateway.server.asgi import app_factory, serving_app
from gateway.db.migrate import upgrade_head
from gateway.settings import load_settings

upgrade_head(load_settings().database_url)
app = serving_app(load_settings()) if sys.argv[1] == "test-app" else app_factory()
before = {"threshold": gc.get_threshold(), "frozen": gc.get_freeze_count()}
with TestClient(app) as client:  # runs the lifespan
    client.get("/healthz")
    after = {"threshold": gc.get_threshold(), "frozen": gc.get_freeze_count()}
print(json.dumps({"before": before, "after": after}))
"""


def probe(tmp_path: Path, which: str) -> dict[str, dict[str, list[int] | int]]:
    env = {
        "GATEWAY_DATABASE_URL": f"sqlite:///{tmp_path / 'gateway.db'}",
        "GATEWAY_CONFIG": str(REPO / "config" / "gateway.yaml"),
        "PATH": "/usr/bin:/bin",
    }
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, which], cwd=REPO, env=env, capture_output=True, text=True, check=True
    )
    result: dict[str, dict[str, list[int] | int]] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_the_served_app_freezes_start_up_objects_and_collects_less_often(tmp_path: Path) -> None:
    result = probe(tmp_path, "served-app")
    assert result["before"] == {"threshold": [700, 10, 10], "frozen": 0}
    assert result["after"]["threshold"] == [
        YOUNG_ALLOCATIONS,
        YOUNG_COLLECTIONS_PER_MIDDLE,
        MIDDLE_COLLECTIONS_PER_OLD,
    ]
    frozen = result["after"]["frozen"]
    assert isinstance(frozen, int) and frozen > 10_000  # the imports and the start-up, at least


def test_an_app_built_for_tests_leaves_the_collector_alone(tmp_path: Path) -> None:
    result = probe(tmp_path, "test-app")
    assert result["after"] == result["before"] == {"threshold": [700, 10, 10], "frozen": 0}
