"""Which results_url a Message Batch's results are read from (gateway.providers.anthropic.batch_api):
only one under the provider's own base URL, whose request then carries the provider's key."""

from __future__ import annotations

import pytest

from gateway.providers.anthropic.batch_api import ForeignResultsUrl, check_under_base

BASES = ("https://api.anthropic.com", "http://10.0.0.5:8080/proxy/anthropic")


@pytest.mark.parametrize(
    "url",
    [
        "https://api.anthropic.com/v1/messages/batches/msgbatch_1/results",
        "https://API.anthropic.com:443/v1/messages/batches/msgbatch_1/results?page=2",
        "http://10.0.0.5:8080/proxy/anthropic/v1/messages/batches/msgbatch_1/results",
    ],
)
def test_a_url_under_a_base_is_followed(url: str) -> None:
    check_under_base(url, BASES)


@pytest.mark.parametrize(
    "url",
    [
        "http://api.anthropic.com/v1/messages/batches/msgbatch_1/results",  # another scheme
        "https://api.anthropic.com:8443/v1/messages/batches/msgbatch_1/results",  # another port
        "https://api.anthropic.com.evil.example/v1/messages/batches/msgbatch_1/results",
        "https://evil.example/v1/messages/batches/msgbatch_1/results",
        "https://user@evil.example/results",
        "http://10.0.0.5:8080/proxy/other/results",  # outside the base's path
        "http://10.0.0.5:8080/proxy/anthropicx/results",
        "http://10.0.0.5:8080/proxy/anthropic/../other/results",  # climbs out of it
        "http://10.0.0.5:8080/proxy/anthropic/%2e%2e/other/results",
        "https://api.anthropic.com:notaport/results",
    ],
)
def test_any_other_url_is_refused_without_its_query(url: str) -> None:
    with pytest.raises(ForeignResultsUrl) as refused:
        check_under_base(url + "?X-Amz-Signature=secret", BASES)
    assert "secret" not in str(refused.value) and "results_url" in str(refused.value)
