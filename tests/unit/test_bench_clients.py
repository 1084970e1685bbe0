"""Which servers `duo bench --clients` measures, and at which settings."""

from __future__ import annotations

from duo.bench.clients import _variants
from duo.session.config import SpecConfig


def test_speculative_peers_run_once_per_draft_length_and_the_rest_once() -> None:
    spec = SpecConfig(draft_max=8)
    servers = ["duo", "llama-server", "llama-server+ngram", "llama-server+md"]
    got = _variants(servers, spec, [4, 16])
    assert [(label, kind, s.draft_max) for label, kind, s in got] == [
        ("duo", "duo", 8),
        ("llama-server", "llama-server", 8),
        ("llama-server+ngram/k4", "llama-server+ngram", 4),
        ("llama-server+ngram/k16", "llama-server+ngram", 16),
        ("llama-server+md/k4", "llama-server+md", 4),
        ("llama-server+md/k16", "llama-server+md", 16),
    ]
    assert [label for label, _, _ in _variants(servers, spec, None)] == servers
