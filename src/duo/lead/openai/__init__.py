"""The OpenAI-compatible HTTP API and llama-server's extensions."""
