"""The names the gateway's spans and metrics carry: the GenAI semantic conventions' (`gen_ai.*`,
still "development"), the stable ones they lean on (`error.type`, ...), and the gateway's own.

The GenAI names are written out here rather than imported: `opentelemetry-semantic-conventions`
marks its `gen_ai` module as moved to the GenAI conventions' own repository (the names are the same).
"""

from __future__ import annotations

from typing import Final

from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.semconv.attributes.http_attributes import HTTP_RESPONSE_STATUS_CODE
from opentelemetry.semconv.attributes.server_attributes import SERVER_ADDRESS

from gateway.providers.base import Endpoint
from gateway.settings import ProviderKind

OPERATION: Final = "gen_ai.operation.name"
PROVIDER: Final = "gen_ai.provider.name"
REQUEST_MODEL: Final = "gen_ai.request.model"
REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
REQUEST_STREAM: Final = "gen_ai.request.stream"
REQUEST_CHOICES: Final = "gen_ai.request.choice.count"
RESPONSE_MODEL: Final = "gen_ai.response.model"
RESPONSE_ID: Final = "gen_ai.response.id"
INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"  # the whole prompt, its cached part included
OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
CACHE_CREATION_TOKENS: Final = "gen_ai.usage.cache_creation.input_tokens"
TOKEN_TYPE: Final = "gen_ai.token.type"
TOKEN_INPUT: Final = "input"
TOKEN_OUTPUT: Final = "output"
SESSION_ID: Final = "session.id"
ERROR: Final = ERROR_TYPE
HTTP_STATUS: Final = HTTP_RESPONSE_STATUS_CODE
UPSTREAM_HOST: Final = SERVER_ADDRESS

TOKEN_USAGE: Final = "gen_ai.client.token.usage"
OPERATION_DURATION: Final = "gen_ai.client.operation.duration"
TIME_TO_FIRST_CHUNK: Final = "gen_ai.client.operation.time_to_first_chunk"

# the gateway's own
REQUEST_ID: Final = "gateway.request.id"
CLIENT_REQUEST_ID: Final = "gateway.client_request.id"  # the client's X-Request-ID
TEAM_ID: Final = "gateway.team.id"
KEY_ID: Final = "gateway.key.id"
BATCH_ID: Final = "gateway.batch.id"
PRIORITY: Final = "gateway.priority"
DEPLOYMENT: Final = "gateway.deployment"
PROVIDER_ID: Final = "gateway.provider"  # the catalog's provider name (gen_ai.provider.name: its kind)
REGION: Final = "gateway.region"
ATTEMPT: Final = "gateway.attempt"
COST: Final = "gateway.cost_usd"
USAGE_SOURCE: Final = "gateway.usage.source"
QUEUE_MS: Final = "gateway.queue_ms"
TTFT_MS: Final = "gateway.ttft_ms"
LATENCY_MS: Final = "gateway.latency_ms"
QUEUE_WAIT_EVENT: Final = "gateway.queue_wait"

OPERATIONS: Final = {
    Endpoint.CHAT: "chat",
    Endpoint.COMPLETIONS: "text_completion",
    Endpoint.EMBEDDINGS: "embeddings",
    Endpoint.RESPONSES: "chat",
    Endpoint.MESSAGES: "chat",
}

# gen_ai.provider.name by provider kind; the mock upstream is no provider the conventions know
PROVIDER_NAMES: Final = {
    ProviderKind.OPENAI: "openai",
    ProviderKind.AZURE: "azure.ai.openai",
    ProviderKind.ANTHROPIC: "anthropic",
    ProviderKind.MOCK: "gateway.mock",
}
