"""`gateway batches quote FILE`: a Batch API input file's quote as a table, from a running gateway
(`POST /v1/gateway/batches/quote` with the file's lines, as the team of `--key`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import httpx
import msgspec

from gateway.commands.terminal import render_table
from gateway.schemas.quotes import BatchQuote, QuoteDuration, QuoteLane

QUOTE_TIMEOUT_S = 120.0


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 3600:
        return f"{value / 3600:.1f}h"
    return f"{value / 60:.1f}m" if value >= 120 else f"{value:.1f}s"


def duration_cell(took: QuoteDuration) -> str:
    if took.expected_s is None:
        return f"within {seconds(took.bound_s)}" if took.bound_s is not None else took.basis
    spread = f" ({seconds(took.p10_s)}-{seconds(took.p90_s)})"
    bound = "" if took.bound_s is None else f", at most {seconds(took.bound_s)}"
    return f"{seconds(took.expected_s)}{spread}{bound}"


def quote_table(quote: BatchQuote) -> str:
    """One row a lane, then what each placement rule picks."""

    def row(lane: QuoteLane) -> list[str]:
        tokens = lane.tokens
        return [
            lane.id,
            lane.execution,
            lane.service_tier or "default",
            str(tokens.prompt),
            str(tokens.cached),
            str(tokens.output),
            tokens.tokenizer,
            f"{lane.shared_prefix_share:.0%}",
            lane.cost,
            duration_cell(lane.duration),
            str(lane.duration.queue_lines),
            "yes" if lane.meets_window else "no",
        ]

    headers = ["lane", "execution", "tier", "prompt", "cached", "output", "counted with", "prefix share"]
    headers += ["cost_usd", "duration", "queue", f"within {quote.completion_window}"]
    table = render_table(headers, [row(lane) for lane in quote.lanes])
    picks = f"cheapest: {quote.cheapest}  fastest: {quote.fastest}  by_deadline: {quote.by_deadline}"
    return f"{quote.model}, {quote.lines} lines\n{table}\n{picks}"


def cmd_batches_quote(args: argparse.Namespace) -> int:
    try:
        text = Path(args.file).read_text(encoding="utf-8")
        lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        print(f"{args.file}: {exc}", file=sys.stderr)
        return 2
    body = {"lines": lines, "completion_window": args.window}
    headers = {"authorization": f"Bearer {args.key}"}
    try:
        reply = httpx.post(
            args.url.rstrip("/") + "/v1/gateway/batches/quote",
            json=body,
            headers=headers,
            timeout=QUOTE_TIMEOUT_S,
        )
    except httpx.HTTPError as exc:
        print(f"{args.url}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if reply.status_code != 200:
        print(f"HTTP {reply.status_code}: {reply.text}", file=sys.stderr)
        return 1
    if args.format == "json":
        print(reply.text)
    else:
        print(quote_table(msgspec.json.decode(reply.content, type=BatchQuote)))
    return 0


def add_batches_parser(commands: argparse._SubParsersAction) -> None:
    batches = commands.add_parser("batches", help="batch jobs: quote an input file")
    actions = batches.add_subparsers(dest="action", required=True)
    quote = actions.add_parser(
        "quote", help="what an input file's batch would cost and take on each lane the team may use"
    )
    quote.add_argument("file", help="a Batch API input file (JSONL)")
    quote.add_argument("--url", default="http://localhost:8080", help="the gateway (default %(default)s)")
    quote.add_argument("--key", required=True, help="a team key (sk-gw-...): the lanes are its team's")
    quote.add_argument("--window", default="24h", help="the completion window lanes are checked against")
    quote.add_argument("--format", choices=("table", "json"), default="table")
    quote.set_defaults(func=cmd_batches_quote)
