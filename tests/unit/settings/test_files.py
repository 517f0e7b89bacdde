"""The catalog's `files` section: the database by default, an S3 bucket when asked, with its keys
required and its secret never shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.jobs.files.s3_store import S3FileStore
from gateway.jobs.files.store import open_file_store
from gateway.settings import ConfigError, FileSettings, S3Settings, load_catalog

BASE = """
providers:
  - {name: mock, kind: mock, region: eu}
models:
  - {name: m, deployments: [{provider: mock, model: m}]}
"""
S3 = """
files:
  store: s3
  s3:
    endpoint_url: http://127.0.0.1:9000
    bucket: gateway
    access_key_id: ${S3_KEY_ID}
    secret_access_key: ${S3_SECRET}
"""
ENV = {"S3_KEY_ID": "key-id", "S3_SECRET": "the-secret"}


def catalog_file(tmp_path: Path, files: str = "") -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(BASE + files, encoding="utf-8")
    return path


def test_without_a_files_section_the_database_keeps_the_bytes(tmp_path: Path) -> None:
    files = load_catalog(catalog_file(tmp_path), {}).files
    assert files == FileSettings(store="database", s3=None)
    assert open_file_store(files) is None


def test_an_s3_store_is_read_with_its_defaults_and_environment_references(tmp_path: Path) -> None:
    files = load_catalog(catalog_file(tmp_path, S3), ENV).files
    assert files.s3 == S3Settings(
        endpoint_url="http://127.0.0.1:9000",
        bucket="gateway",
        access_key_id="key-id",
        secret_access_key="the-secret",
        prefix="gateway-files/",
        region="us-east-1",
    )
    store = open_file_store(files)
    assert isinstance(store, S3FileStore)
    assert store.key("file-abc") == "gateway-files/file-abc"


def test_the_secret_is_not_in_the_settings_repr(tmp_path: Path) -> None:
    catalog = load_catalog(catalog_file(tmp_path, S3), ENV)
    assert "the-secret" not in repr(catalog)
    assert "key-id" in repr(catalog.files.s3)


def test_an_s3_store_without_its_block_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"files\.s3: required when files\.store is s3"):
        load_catalog(catalog_file(tmp_path, "files: {store: s3}\n"), {})


@pytest.mark.parametrize("key", ["endpoint_url", "bucket", "access_key_id", "secret_access_key"])
def test_a_missing_s3_key_is_named(tmp_path: Path, key: str) -> None:
    lines = [line for line in S3.splitlines() if not line.strip().startswith(f"{key}:")]
    with pytest.raises(ConfigError, match=rf"files\.s3: .*`{key}`"):
        load_catalog(catalog_file(tmp_path, "\n".join(lines) + "\n"), ENV)


def test_an_empty_s3_key_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"files\.s3\.secret_access_key: must not be empty"):
        load_catalog(catalog_file(tmp_path, S3), {"S3_KEY_ID": "key-id", "S3_SECRET": ""})


@pytest.mark.parametrize(
    ("endpoint", "problem"),
    [
        ("127.0.0.1:9000", "must be an http:// or https:// URL"),
        ("http://user:pw@127.0.0.1:9000", "not in the URL"),
    ],
)
def test_a_bad_endpoint_is_refused(tmp_path: Path, endpoint: str, problem: str) -> None:
    files = S3.replace("http://127.0.0.1:9000", endpoint)
    with pytest.raises(ConfigError, match=rf"files\.s3\.endpoint_url: .*{problem}") as refused:
        load_catalog(catalog_file(tmp_path, files), ENV)
    assert "pw" not in str(refused.value)


def test_an_unknown_store_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"files\.store: must be database or s3"):
        load_catalog(catalog_file(tmp_path, "files: {store: disk}\n"), {})
