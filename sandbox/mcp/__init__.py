"""``sandbox mcp``: the run's tools over the Model Context Protocol (tools: what they do; server: the SDK)."""
