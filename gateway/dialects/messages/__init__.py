"""Anthropic's Messages API as clients send it: passed through to Anthropic, translated to chat for every other provider."""
