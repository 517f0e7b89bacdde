"""The flags of `gateway mock-upstream --engine vllm`: the engine's knobs and the replica count."""

from __future__ import annotations

import argparse
from dataclasses import fields

from mock_upstream.vllm.engine import EngineConfig

_HELP = {
    "max_num_seqs": "running sequences at most",
    "num_gpu_blocks": "KV-cache blocks",
    "block_size": "tokens per KV-cache block",
    "max_num_batched_tokens": "prefill tokens per step (chunked prefill)",
    "prefill_s_per_token": "seconds of a step per prefilled token",
    "decode_step_s": "seconds of a decode step with an empty batch",
    "decode_growth": "a step's decode time grows by this share per running sequence",
    "time_scale": "multiplies every step's duration (0.01: 100 times faster)",
    "default_max_tokens": "output tokens of a request without max_tokens",
    "share_prefix_blocks": "prefix caching: sequences whose prompts open alike share KV blocks",
}


def add_vllm_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("--engine vllm")
    for config_field in fields(EngineConfig):
        flag = "--" + config_field.name.replace("_", "-")
        default = config_field.default
        help_text = f"{_HELP[config_field.name]} (default {default})"
        if isinstance(default, bool):  # before int: a bool is an int; --x and --no-x
            group.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=help_text)
            continue
        kind = int if isinstance(default, int) else float
        group.add_argument(flag, type=kind, default=default, help=help_text)
    group.add_argument(
        "--replicas", type=int, default=1, help="engines served under /r0 ... /r{N-1} (default 1)"
    )


def config_from_args(args: argparse.Namespace) -> EngineConfig:
    return EngineConfig(
        **{config_field.name: getattr(args, config_field.name) for config_field in fields(EngineConfig)}
    )


def run_vllm_from_args(args: argparse.Namespace) -> int:
    from mock_upstream.vllm.app import run_simulator  # uvicorn only when serving

    config = config_from_args(args)
    if (
        min(
            config.max_num_seqs,
            config.num_gpu_blocks,
            config.block_size,
            config.max_num_batched_tokens,
            args.replicas,
        )
        < 1
    ):
        raise SystemExit("gateway mock-upstream: the engine's sizes and --replicas must be positive")
    run_simulator(args.host, args.port, config, args.replicas)
    return 0
