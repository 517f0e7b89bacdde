"""Prompts of a chosen length in the simulator's tokens (four characters each, bench's messages
rendered as `<|role|>text` and a newline), made unique or shared on purpose."""

from __future__ import annotations

from bench.scheduling.load import Chat

CHARS_PER_TOKEN = 4  # mock_upstream.vllm.tokens
WORDS = ("amber ", "basalt ", "cobalt ", "dune ", "ember ", "fjord ", "garnet ", "heath ", "iris ", "jade ")


def text(tokens: int, opening: str) -> str:
    """About `tokens` tokens of text that starts with `opening`: two texts with different openings
    share no prefix-cache block."""
    size = tokens * CHARS_PER_TOKEN
    body = opening + " " + "".join(WORDS[(i * 7 + len(opening)) % len(WORDS)] for i in range(size // 5 + 1))
    return body[:size]


def chat(
    user: str,
    max_tokens: int,
    *,
    system: str | None = None,
    headers: dict[str, str] | None = None,
    stream: bool = False,
) -> Chat:
    messages = [{"role": "system", "content": system}] if system is not None else []
    messages.append({"role": "user", "content": user})
    return Chat(messages, max_tokens, headers or {}, stream)


def tokens_of(chat_request: Chat) -> int:
    """The prompt's length as the simulator counts it (mock_upstream.vllm.tokens)."""
    rendered = sum(len(f"<|{m['role']}|>{m['content']}\n") for m in chat_request.messages)
    return -(-rendered // CHARS_PER_TOKEN)
