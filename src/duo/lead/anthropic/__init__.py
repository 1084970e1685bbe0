"""Anthropic\x27s Messages API on the lead (duo.lead.anthropic.messages)."""
