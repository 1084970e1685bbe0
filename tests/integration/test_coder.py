"""The qwen-coder pair (Qwen2.5-Coder-0.5B-Instruct, main F16 or BF16, draft Q3_K_M) on a
code edit: every mode's output is the main model alone's (greedy, --deterministic)."""

from __future__ import annotations

from pathlib import Path

import pytest

from duo.llama.models import get_pair, prepare
from duo.session.config import ModelConfig, SpecConfig
from duo.session.session import Session

pytestmark = pytest.mark.integration

PROMPT = (Path(__file__).parent / "code_edit_prompt.txt").read_text()
N = 64


def test_a_code_edit_in_every_mode_equals_the_main_model_alone() -> None:
    main, draft = prepare(get_pair("qwen-coder"))
    models = ModelConfig(main=main, draft=draft, n_ctx=1024)
    modes = {
        "target": SpecConfig(mode="target", deterministic=True),
        "sync": SpecConfig(mode="sync", draft_max=8, deterministic=True),
        "async": SpecConfig(mode="async", adaptive=False, deterministic=True),
    }
    outputs, drafted = {}, {}
    for name, spec in modes.items():
        with Session(models, spec) as s:
            vocab = s.main.vocab
            prompt = vocab.tokenize(
                vocab.render_chat([{"role": "user", "content": PROMPT}]), add_special=False
            )
            tokens: list[int] = []
            stats = s.run(prompt, N, lambda r, out=tokens: out.extend(r.tokens))  # type: ignore[misc]
            outputs[name] = tokens
            drafted[name] = stats.drafted
            if name == "target":
                text = b"".join(map(vocab.piece, tokens)).decode()
    assert "def load_config(path):" in text  # it copies the file, as asked
    assert drafted["sync"] > 0 and drafted["async"] > 0
    assert outputs["sync"] == outputs["target"]
    assert outputs["async"] == outputs["target"]
