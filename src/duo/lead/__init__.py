"""The lead: the engine thread and its jobs (engine), the OpenAI-compatible API (openai),
tool calling (tools), the web page (web), composed in build."""
