"""The `gateway mock-upstream` command (also `python -m mock_upstream`): flags to behaviour."""

from __future__ import annotations

import argparse
from typing import Any

from mock_upstream.behaviour import BehaviourError, MockBehaviour, header_overrides, with_overrides
from mock_upstream.vllm.cli import add_vllm_arguments, run_vllm_from_args

# flag -> (MockBehaviour field, type, help)
_BEHAVIOUR_FLAGS: tuple[tuple[str, str, type, str], ...] = (
    ("--latency-ms", "latency_ms", float, "delay before the first byte"),
    ("--chunk-delay-ms", "chunk_delay_ms", float, "delay between stream chunks"),
    ("--chunks", "chunks", int, "content chunks per stream (default 4)"),
    ("--prompt-tokens", "prompt_tokens", int, "fixed prompt tokens (default: counted from the request)"),
    ("--completion-tokens", "completion_tokens", int, "completion tokens (default 16)"),
    ("--cached-tokens", "cached_tokens", int, "fixed cached tokens (default: automatic prefix cache)"),
    ("--fail-rate", "fail_rate", float, "share of requests that fail, 0..1"),
    ("--fail-status", "fail_status", int, "status of an injected failure (default 500)"),
    ("--retry-after", "retry_after", float, "seconds sent as retry-after with a failure"),
    ("--seed", "seed", int, "seed of the random source that decides failures"),
)


def add_mock_upstream_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9090)
    for flag, field, kind, help_text in _BEHAVIOUR_FLAGS:
        parser.add_argument(flag, dest=field, type=kind, default=None, help=help_text)
    parser.add_argument("--behaviour", default=None, help="any other behaviour fields, as a JSON object")
    parser.add_argument(
        "--engine",
        choices=("mock", "vllm"),
        default="mock",
        help="vllm: a simulated continuous-batching server",
    )
    add_vllm_arguments(parser)


def behaviour_from_args(args: argparse.Namespace) -> MockBehaviour:
    """The behaviour the flags describe: `--behaviour` JSON first, then the single flags over it."""
    behaviour = with_overrides(MockBehaviour(), header_overrides(args.behaviour))
    flags: dict[str, Any] = {
        field: getattr(args, field) for _, field, _, _ in _BEHAVIOUR_FLAGS if getattr(args, field) is not None
    }
    return with_overrides(behaviour, flags)


def run_from_args(args: argparse.Namespace) -> int:
    from mock_upstream.server import run_mock_upstream  # uvicorn only when serving

    if args.engine == "vllm":
        return run_vllm_from_args(args)
    try:
        behaviour = behaviour_from_args(args)
    except BehaviourError as exc:
        raise SystemExit(f"gateway mock-upstream: {exc}") from exc
    run_mock_upstream(args.host, args.port, behaviour)
    return 0


def add_mock_upstream_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register `mock-upstream` on the `gateway` CLI; the parser's `func(args)` runs it."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "mock-upstream", help="run a fake OpenAI- and Anthropic-compatible provider"
    )
    add_mock_upstream_arguments(parser)
    parser.set_defaults(func=run_from_args)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mock_upstream")
    add_mock_upstream_arguments(parser)
    return run_from_args(parser.parse_args(argv))
