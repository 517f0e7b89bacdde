"""The catalog's `jobs` section: defaults, and values out of range refused at start-up."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.settings import ConfigError, JobSettings, load_catalog

BASE = """
providers:
  - {name: mock, kind: mock, region: eu}
models:
  - {name: m, deployments: [{provider: mock, model: m}]}
"""


def catalog_file(tmp_path: Path, jobs: str = "") -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(BASE + jobs, encoding="utf-8")
    return path


def test_without_a_jobs_section_the_runner_runs_with_the_defaults(tmp_path: Path) -> None:
    assert load_catalog(catalog_file(tmp_path), {}).jobs == JobSettings()
    assert JobSettings().runner and JobSettings().concurrency == 256


def test_the_jobs_section_is_read(tmp_path: Path) -> None:
    jobs = "jobs: {runner: false, lease_s: 3, poll_interval_s: 0.5, concurrency: 8, pause_s: 1}\n"
    assert load_catalog(catalog_file(tmp_path, jobs), {}).jobs == JobSettings(
        runner=False, lease_s=3, poll_interval_s=0.5, concurrency=8, pause_s=1
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [("lease_s", "0.1"), ("poll_interval_s", "0"), ("concurrency", "0"), ("pause_s", "-1")],
)
def test_a_value_out_of_range_is_refused(tmp_path: Path, key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"jobs.{key}: out of range"):
        load_catalog(catalog_file(tmp_path, f"jobs: {{{key}: {value}}}\n"), {})
