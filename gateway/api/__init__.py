"""The HTTP surface: thin handlers by URL prefix (front/ for the proxied hot path, openai/, anthropic/,
gateway/, admin/), the operations endpoints and the OpenAPI document."""
