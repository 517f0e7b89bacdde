"""What clients speak besides chat completions, served on any provider: OpenAI's Responses API and
Anthropic's Messages API."""
