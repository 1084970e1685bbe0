"""OpenAI's Responses API on the lead (duo.lead.responses.routes)."""
