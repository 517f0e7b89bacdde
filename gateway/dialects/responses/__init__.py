"""OpenAI's Responses API as clients send it: passed through where the upstream serves it, translated to chat elsewhere."""
