"""The drafter-driven verifier API (seed 003): POST /prefill and /verify, GET /stats."""
