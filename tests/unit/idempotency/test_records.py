"""Claims and answers survive their encoding as they are, and an answer's size counts what it holds."""

from __future__ import annotations

from gateway.idempotency.records import Claim, StoredAnswer, decode_record, encode_record


def test_a_claim_and_an_answer_decode_as_they_were() -> None:
    claim = Claim("f" * 64, "req_1")
    answer = StoredAnswer(
        "f" * 64, 200, {"x-request-id": "req_1"}, frames=[b"data: 1\n\n", b"data: [DONE]\n\n"]
    )

    assert decode_record(encode_record(claim)) == claim
    assert decode_record(encode_record(answer)) == answer
    assert encode_record(claim) == encode_record(Claim("f" * 64, "req_1"))  # compared byte for byte


def test_an_answers_size_counts_body_frames_and_headers() -> None:
    answer = StoredAnswer("f", 200, {"ab": "cd"}, body=b"12345", frames=[b"123", b"4"])

    assert answer.size() == 5 + 4 + 4
