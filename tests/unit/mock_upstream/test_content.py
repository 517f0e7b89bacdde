from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from mock_upstream.content import (
    completion_words,
    embedding_vector,
    split_pieces,
    text_tokens,
    tool_input,
)


def test_words_are_a_function_of_the_seed() -> None:
    assert completion_words("hello", 8) == completion_words("hello", 8)
    assert completion_words("hello", 8) != completion_words("goodbye", 8)
    assert completion_words("hello", 8, salt="1") != completion_words("hello", 8, salt="0")
    assert len(completion_words("hello", 300)) == 300


@given(count=st.integers(0, 60), chunks=st.integers(1, 10))
def test_pieces_join_back_to_the_text(count: int, chunks: int) -> None:
    words = completion_words("seed", count)
    pieces = split_pieces(words, chunks)
    assert "".join(pieces) == " ".join(words)
    assert len(pieces) == min(count, chunks)


def test_text_tokens_round_up_utf8_bytes() -> None:
    assert text_tokens("") == 0
    assert text_tokens("abcd") == 1
    assert text_tokens("abcde") == 2
    assert text_tokens("é") == 1  # two bytes


def test_embedding_is_deterministic_and_unit_length() -> None:
    vector = embedding_vector("text", 8)
    assert vector == embedding_vector("text", 8)
    assert len(vector) == 8
    assert math.isclose(math.sqrt(sum(v * v for v in vector)), 1.0, abs_tol=1e-5)


def test_tool_input_fills_required_properties() -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "unit": {"type": "string"}},
        "required": ["city", "days"],
    }
    assert tool_input(schema) == {"city": "mock", "days": 1}
    assert tool_input(None) == {}
