"""Properties of `load_catalog`: any YAML document loads or raises ConfigError, never anything else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.settings import Catalog, ConfigError, load_catalog
from tests.support.gateway import REPO

DEFAULT = yaml.safe_load((REPO / "config" / "gateway.yaml").read_text())
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(
        ["${UNSET_VARIABLE}", "${FUZZ_SET:-fallback}", "${", "mock", "openai", "eu-west", "1e400"]
    ),
)
YAML_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=3),
    max_leaves=10,
)
PATHS_IN_DEFAULT = st.sampled_from(
    [
        ("providers", 0, "kind"),
        ("providers", 0, "name"),
        ("providers", 1, "region"),
        ("providers", 0, "timeout_s"),
        ("models", 0, "name"),
        ("models", 0, "deployments"),
        ("models", 0, "deployments", 0, "provider"),
        ("models", 0, "deployments", 0, "price"),
        ("models", 0, "deployments", 0, "price", "input"),
        ("models", 1, "deployments", 0, "weight"),
        ("retry", "max_attempts"),
        ("retry", "backoff_base_s"),
        ("circuit", "cooldown_s"),
        ("batches", "idle_ttl_s"),
        ("limits", "max_body_bytes"),
        ("limits", "max_messages"),
        ("providers",),
        ("models",),
    ]
)


def _loads_or_refuses(tmp_path: Path, content: str | bytes) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8", "surrogatepass"))
    refused: ConfigError | None = None
    try:
        catalog = load_catalog(path, {"FUZZ_SET": "set"})
    except ConfigError as exc:
        refused = exc
    if refused is not None:
        assert str(path) in str(refused)  # the message names the file
    else:
        assert isinstance(catalog, Catalog)


def _replace(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    node = document
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return document


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=200)
@given(st.lists(st.tuples(PATHS_IN_DEFAULT, YAML_VALUES), min_size=1, max_size=3), st.data())
def test_a_mutated_default_config_loads_or_raises_config_error(
    tmp_path: Path, edits: list[tuple[tuple[Any, ...], Any]], data: st.DataObject
) -> None:
    document = yaml.safe_load(yaml.safe_dump(DEFAULT))
    for path, value in edits:
        try:
            _replace(document, path, value)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier edit removed the parent: the document is still worth loading
    _loads_or_refuses(tmp_path, yaml.safe_dump(document, allow_unicode=True))


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(YAML_VALUES)
def test_any_yaml_document_loads_or_raises_config_error(tmp_path: Path, document: Any) -> None:
    _loads_or_refuses(tmp_path, yaml.safe_dump(document, allow_unicode=True))


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.text(max_size=200), st.binary(max_size=200)))
def test_any_file_content_loads_or_raises_config_error(tmp_path: Path, content: str | bytes) -> None:
    _loads_or_refuses(tmp_path, content)


def test_a_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    _loads_or_refuses(tmp_path, "providers: []\nmodels: []\n# caf\u00e9\n".encode("latin-1"))


def test_a_document_nested_too_deeply_is_a_config_error(tmp_path: Path) -> None:
    _loads_or_refuses(tmp_path, "providers: " + "[" * 5000 + "]" * 5000 + "\nmodels: []\n")
