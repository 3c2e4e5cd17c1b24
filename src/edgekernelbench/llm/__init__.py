"""LLM generation: prompts (jinja2 templates), response parsing, providers (OpenAI-compatible, Anthropic,
replay), a response cache, and the one-shot generation of a run directory's candidates."""
