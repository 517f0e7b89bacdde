"""OpenAI-shaped upstreams (OpenAI, Azure OpenAI, vLLM, SGLang, TGI): the one adapter they share, the members it sets in their replies, and a chat completion assembled from a stream."""
