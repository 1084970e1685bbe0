"""The lead's HTTP wire types: the shapes of its answers, as typed dicts, one module per API.

    duo.lead.protocol.openai    completions, chat completions and their stream chunks,
                                errors, models (and usage and timings from a Stats)
    duo.lead.protocol.llama     llama-server's extension endpoints: tokens, props, slots,
                                health
    duo.lead.protocol.verifier  seed 003's verifier: prefill, verify, stats

The engine returns its own objects (duo.lead.engine.lead: Props, Status, Slot); the API
turns them into these. The requests are msgspec models, beside the code that serves them
(duo.lead.openai.requests, .chat; duo.lead.verifier.requests).
"""
