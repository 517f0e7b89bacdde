"""OpenAI-shaped upstreams (OpenAI, Azure OpenAI, vLLM, SGLang, TGI): the one adapter they share, its wire format, and a chat completion assembled from its stream."""
