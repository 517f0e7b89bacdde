"""Anthropic's surface: the Messages API and its count_tokens."""
