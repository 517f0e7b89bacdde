"""OpenAI's surface beside the proxied endpoints: the OpenAPI declarations of chat, completions, embeddings, models and responses, and the Files and Batch APIs."""
