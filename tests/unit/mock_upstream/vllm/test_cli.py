"""`gateway mock-upstream --engine vllm`: the flags become the engine's configuration."""

from __future__ import annotations

import argparse

from mock_upstream.cli import add_mock_upstream_parser
from mock_upstream.vllm.cli import config_from_args
from mock_upstream.vllm.engine import EngineConfig


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gateway")
    add_mock_upstream_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["mock-upstream", *argv])


def test_the_default_engine_is_the_plain_mock() -> None:
    args = parse()
    assert args.engine == "mock" and config_from_args(args) == EngineConfig() and args.replicas == 1


def test_vllm_flags_become_the_engine_config() -> None:
    args = parse("--engine", "vllm", "--max-num-seqs", "64", "--block-size", "32", "--time-scale", "0.01",
                 "--replicas", "3")  # fmt: skip
    assert args.engine == "vllm" and args.replicas == 3
    assert config_from_args(args) == EngineConfig(max_num_seqs=64, block_size=32, time_scale=0.01)


def test_prefix_sharing_is_on_by_default_and_has_a_negative_flag() -> None:
    assert config_from_args(parse("--engine", "vllm")).share_prefix_blocks is True
    assert (
        config_from_args(parse("--engine", "vllm", "--no-share-prefix-blocks")).share_prefix_blocks is False
    )
    assert config_from_args(parse("--engine", "vllm", "--share-prefix-blocks")).share_prefix_blocks is True
