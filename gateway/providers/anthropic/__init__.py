"""Anthropic as an upstream: chat completions translated to its Messages API and back, its prompt-cache rules and structured output."""
