"""Chat prompts rendered by the GGUF's own template, compiled once per template."""

from __future__ import annotations

from pathlib import Path

import pytest

from duo.llama import vocab
from duo.llama.backend import Model

pytestmark = pytest.mark.integration

CHAT = [{"role": "user", "content": "Name a colour."}]


def test_a_template_is_compiled_once_and_a_new_one_is_used_at_once(
    pair: tuple[Path, Path],
) -> None:
    with Model(pair[0], n_ctx=256) as model:
        first = model.vocab.render_chat(CHAT)
        before = vocab._formatter.cache_info()
        again = model.vocab.render_chat([{"role": "user", "content": "Name a shape."}])
        after = vocab._formatter.cache_info()
        assert "Name a colour." in first and "Name a shape." in again
        assert (after.hits, after.misses) == (before.hits + 1, before.misses)

        model.vocab.template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
        assert model.vocab.render_chat(CHAT) == "<user>Name a colour."
        model.vocab.template = None
        assert model.vocab.render_chat(CHAT) == first
