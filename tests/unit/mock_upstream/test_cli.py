from __future__ import annotations

import argparse

import pytest

from mock_upstream.behaviour import MockBehaviour
from mock_upstream.cli import add_mock_upstream_parser, behaviour_from_args, run_from_args


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gateway")
    add_mock_upstream_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["mock-upstream", *argv])


def test_defaults() -> None:
    args = parse()
    assert (args.host, args.port) == ("127.0.0.1", 9090)
    assert behaviour_from_args(args) == MockBehaviour()
    assert args.func is run_from_args


def test_flags_become_the_behaviour() -> None:
    args = parse(
        "--latency-ms", "5", "--chunks", "2", "--fail-rate", "0.25", "--retry-after", "1", "--seed", "3"
    )
    assert behaviour_from_args(args) == MockBehaviour(
        latency_ms=5, chunks=2, fail_rate=0.25, retry_after=1, seed=3
    )


def test_single_flags_override_the_behaviour_json() -> None:
    args = parse("--behaviour", '{"garbage": true, "chunks": 9}', "--chunks", "2")
    assert behaviour_from_args(args) == MockBehaviour(garbage=True, chunks=2)


def test_invalid_flags_exit_with_a_message() -> None:
    with pytest.raises(SystemExit, match="fail_rate"):
        run_from_args(parse("--fail-rate", "3"))
