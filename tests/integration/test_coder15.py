"""The qwen-coder-1.5b pair (Qwen2.5-Coder 1.5B main, 0.5B draft, both Q4_K_M as
published) on a code edit: duo as a user runs it, with no placement flags, writes what the
main model alone writes (greedy)."""

from __future__ import annotations

from pathlib import Path

import pytest

from duo.llama.models import get_pair, prepare
from duo.session.config import ModelConfig, SpecConfig
from duo.session.session import Session
from duo.session.threads import with_threads

pytestmark = pytest.mark.integration

PROMPT = (Path(__file__).parent / "code_edit_prompt.txt").read_text()
N = 48


def edit(session: Session) -> tuple[list[int], int]:
    vocab = session.main.vocab
    text = vocab.render_chat([{"role": "user", "content": PROMPT}])
    tokens: list[int] = []
    stats = session.run(
        vocab.tokenize(text, add_special=False), N, lambda r: tokens.extend(r.tokens)
    )
    return tokens, stats.drafted


def test_a_code_edit_with_no_placement_flags_equals_the_main_model_alone() -> None:
    main, draft = prepare(get_pair("qwen-coder-1.5b"))
    spec = SpecConfig()  # async, every draft source, the adaptive policy
    models = with_threads(ModelConfig(main=main, draft=draft, n_ctx=1024), spec)
    with Session(models, spec) as default:
        assert default.share is not None or models.threads_alone == 0  # one core: nothing lent
        got, drafted = edit(default)
        way = default.sharing().way
    with Session(
        ModelConfig(main=main, draft=None, n_ctx=1024), SpecConfig(mode="target")
    ) as alone:
        want, _ = edit(alone)
    assert got == want, f"default ({way}) differs from the main model alone"
    assert drafted > 0  # the edit copies the file: the lookups draft it
