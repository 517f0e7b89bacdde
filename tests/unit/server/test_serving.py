"""What `gateway serve` hands uvicorn: its fixed options, the connection settings, its log set-up;
and the metrics directory of its workers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import uvicorn

from gateway.logs import server_log_config
from gateway.server.serving import APP, OPTIONS, process_group_metrics, uvicorn_options
from gateway.settings import load_settings


def test_the_connection_settings_reach_uvicorn() -> None:
    settings = load_settings({"GATEWAY_KEEP_ALIVE_TIMEOUT_S": "2", "GATEWAY_LIMIT_CONCURRENCY": "300"})
    config = uvicorn.Config(APP, **uvicorn_options(settings))
    assert (config.timeout_keep_alive, config.limit_concurrency) == (2, 300)
    assert config.http == OPTIONS["http"] == "httptools"


def test_by_default_uvicorn_keeps_its_own_defaults() -> None:
    config = uvicorn.Config(APP, **uvicorn_options(load_settings({})))
    default = uvicorn.Config(APP)
    assert (config.timeout_keep_alive, config.limit_concurrency) == (
        default.timeout_keep_alive,
        default.limit_concurrency,
    )


def without_metrics_dir() -> dict[str, str]:
    """This process's environment, apart: what serving writes there stays in the test."""
    return {name: value for name, value in os.environ.items() if name != "PROMETHEUS_MULTIPROC_DIR"}


def test_several_workers_get_a_fresh_metrics_directory_removed_at_the_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "environ", without_metrics_dir())
    with process_group_metrics(load_settings({}), workers=2) as directory:
        assert directory is not None and directory.is_dir()
        assert list(directory.iterdir()) == []
        assert os.environ["PROMETHEUS_MULTIPROC_DIR"] == str(directory)  # what the workers inherit
        assert load_settings(dict(os.environ)).metrics_dir == str(directory)
        (directory / "counter_gateway_1.db").write_bytes(b"")
    assert not directory.exists()


def test_a_given_metrics_directory_is_emptied_of_a_previous_runs_files_and_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    given = tmp_path / "metrics"
    given.mkdir()
    (given / "counter_gateway_41.db").write_bytes(b"old counts")
    (given / "README").write_text("not a metrics file")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(given))
    settings = load_settings({"PROMETHEUS_MULTIPROC_DIR": str(given)})
    for workers in (1, 3):  # one worker uses it too: prometheus_client reads the same variable
        (given / "histogram_gateway_42.db").write_bytes(b"old buckets")
        with process_group_metrics(settings, workers) as directory:
            assert directory == given
            assert sorted(p.name for p in given.iterdir()) == ["README"]
        assert given.is_dir()


def test_one_worker_without_a_directory_keeps_its_metrics_in_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "environ", without_metrics_dir())
    with process_group_metrics(load_settings({}), workers=1) as directory:
        assert directory is None
        assert "PROMETHEUS_MULTIPROC_DIR" not in os.environ


def test_uvicorn_logs_through_the_gateways_renderer() -> None:
    for log_format in ("json", "console"):
        settings = load_settings({"GATEWAY_LOG_FORMAT": log_format})
        config = uvicorn.Config(APP, **uvicorn_options(settings))
        assert config.log_config == server_log_config(log_format)
        assert config.log_level == "info"  # its start-up and shutdown lines
