"""Code editors on a real `duo lead` (Qwen2.5-Coder 0.5B, which has fill-in-the-middle
tokens): llama.vim's and llama.vscode's own requests replayed (tests/integration/fixtures),
a native /completion stream read as llama-server's clients read it, --cache-reuse on moved
chunks, and /infill's text with drafters equal to the main model's alone (greedy)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from duo.llama.backend import Model
from duo.llama.models import get_pair, prepare
from duo.sse import DONE, iter_events

from .conftest import Cluster

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).parent / "fixtures"
TIMEOUT = 120.0
# Real source from the standard library, which no one here wrote: a file and two others
# of its package, as an editor's ring buffer holds them.
STDLIB = Path(json.__file__).parent


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def coder() -> tuple[Path, Path]:
    """(main F16, draft Q3_K_M) of the qwen-coder pair."""
    return prepare(get_pair("qwen-coder"))


@pytest.fixture(scope="module")
def editor_lead(
    coder: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A lead as an editor's: the small model, three slots (llama.vscode's n_cmpl), moved
    chunks reused."""
    with Cluster(tmp_path_factory.mktemp("editor")) as c:
        _, url = c.lead("-m", str(coder[1]), "-np", "3", "-c", "2048", "--cache-reuse", "16",
                        "--quiet")  # fmt: skip
        yield url


def post(url: str, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, timeout=TIMEOUT)


def test_llama_vim_s_requests_are_answered_as_it_reads_them(editor_lead: str) -> None:
    warm = post(editor_lead, "/infill", fixture("llama_vim_warmup"))
    assert warm.status_code == 200 and warm.json() == {}  # response_fields: [""]
    body = fixture("llama_vim_infill")
    r = post(editor_lead, "/infill", body)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert set(answer) == set(body["response_fields"])
    # llama.vim takes an answer only if its text holds `"content":"` exactly.
    assert '"content":"' in r.text
    assert isinstance(answer["content"], str) and answer["truncated"] is False
    # The warm-up read the ring buffer's chunk: the request found part of its prompt cached.
    assert answer["timings/prompt_n"] > 0 and answer["tokens_cached"] > answer["timings/prompt_n"]


def test_llama_vscode_s_n_cmpl_gets_three_completions(editor_lead: str) -> None:
    warm = post(editor_lead, "/infill", fixture("llama_vscode_warmup"))
    assert warm.status_code == 200 and warm.json()["stop_type"] == "limit"
    assert warm.json()["tokens_predicted"] == 0 and warm.json()["content"] == ""
    r = post(editor_lead, "/infill", fixture("llama_vscode_infill"))
    assert r.status_code == 200, r.text
    answers = r.json()
    assert [a["index"] for a in answers] == [0, 1, 2]
    for a in answers:
        assert a["stop"] is True and a["stop_type"] in ("eos", "limit", "word")
        assert a["tokens_predicted"] == len(a["tokens"]) and a["tokens_predicted"] <= 128
        assert "<|fim_middle|>" in a["prompt"] and a["prompt"].startswith("<|repo_name|>")


def test_a_native_stream_is_read_as_llama_server_s_clients_read_it(editor_lead: str) -> None:
    body = {"prompt": "def fibonacci(n):\n", "n_predict": 24, "temperature": 0, "stream": True,
            "n_probs": 2}  # fmt: skip
    events = []
    with httpx.stream("POST", f"{editor_lead}/completion", json=body, timeout=TIMEOUT) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        for event in iter_events(r.iter_lines()):
            assert event.data != DONE
            events.append(event.json())
    *pieces, last = events
    assert all(e["stop"] is False for e in pieces) and last["stop"] is True
    whole = post(editor_lead, "/completion", {**body, "stream": False}).json()
    assert "".join(e["content"] for e in pieces) == whole["content"]
    assert [t for e in pieces for t in e["tokens"]] == whole["tokens"]
    assert len(whole["completion_probabilities"]) == whole["tokens_predicted"]
    assert last["tokens_predicted"] == whole["tokens_predicted"] == 24


def chunk(name: str, lines: int = 40) -> dict[str, str]:
    text = "".join((STDLIB / name).read_text().splitlines(keepends=True)[:lines])
    return {"filename": f"json/{name}", "text": text}


def test_moved_chunks_are_reused_and_the_text_is_the_same(
    coder: tuple[Path, Path], cluster: Cluster
) -> None:
    _, url = cluster.lead("-m", str(coder[1]), "-np", "1", "-c", "2048", "--cache-reuse", "16",
                          "--quiet")  # fmt: skip
    source = (STDLIB / "decoder.py").read_text().splitlines(keepends=True)
    body = {"input_prefix": "".join(source[:60]), "input_suffix": "".join(source[61:80]),
            "prompt": "    ", "n_predict": 32, "temperature": 0}  # fmt: skip
    first = post(
        url, "/infill", {**body, "input_extra": [chunk("scanner.py"), chunk("encoder.py")]}
    )
    assert first.status_code == 200, first.text
    # scanner.py left the ring buffer: encoder.py and everything after it moved back.
    moved = {**body, "input_extra": [chunk("encoder.py")]}
    second = post(url, "/infill", moved).json()
    fresh = post(url, "/infill", {**moved, "cache_prompt": False}).json()
    assert fresh["timings"]["cache_n"] == 0
    shared = 3  # the repo token and its name, before the first chunk
    assert second["timings"]["cache_n"] > shared + 200  # the moved chunk and the FIM part
    assert second["timings"]["prompt_n"] < 60
    assert second["tokens_cached"] == second["tokens_evaluated"] + second["tokens_predicted"] - 1
    # The moved chunk's cells were computed beside scanner.py, which they attended to: the
    # first prediction agrees, later ones may not (see the next test; as llama-server's).
    assert second["tokens"][0] == fresh["tokens"][0]
    again = post(url, "/infill", moved).json()  # the whole prompt cached: nothing shifted
    assert again["timings"]["prompt_n"] <= 1


def test_a_shifted_chunk_predicts_as_the_prompt_read_whole_does_within_measured_bounds(
    coder: tuple[Path, Path],
) -> None:
    """The logits after a moved chunk's KV is shifted into place, against the same prompt
    read whole. Not float rounding alone: the chunk's cells were computed while it attended
    to the text before it, which the new prompt no longer holds, and shifting positions
    does not change that (llama-server's --cache-reuse is the same approximation). The
    figures in the README's cache-reuse section come from here."""
    with Model(coder[1], n_ctx=1024) as m:
        head = m.vocab.tokenize("# a file\n", add_special=False)
        gone = m.vocab.tokenize(chunk("scanner.py")["text"], add_special=False)
        kept = m.vocab.tokenize(chunk("encoder.py", 60)["text"], add_special=False)
        prompt = [*head, *kept]
        m.decode(prompt[:-1], all_logits=False)
        recomputed = np.array(m.decode(prompt[-1:], all_logits=False)[-1])
        m.truncate(0)
        m.decode([*head, *gone, *kept], all_logits=False)
        m.cache_reuse = 16
        assert m.reuse_prefix(prompt[:-1]) == len(prompt) - 1
        assert m.tokens == prompt[:-1]
        shifted = np.array(m.decode(prompt[-1:], all_logits=False)[-1])
    assert shifted.argmax() == recomputed.argmax()
    diff = float(np.abs(shifted - recomputed).max())
    print(f"shifted KV: largest logit difference {diff:.4f}")
    assert 0 < diff < 3.0


def test_infill_text_with_drafters_equals_the_main_model_alone(
    coder: tuple[Path, Path], cluster: Cluster
) -> None:
    main, draft = (str(p) for p in coder)
    source = (STDLIB / "encoder.py").read_text().splitlines(keepends=True)
    body = {"input_prefix": "".join(source[100:140]), "input_suffix": "".join(source[141:150]),
            "input_extra": [chunk("decoder.py")], "prompt": "", "n_predict": 40,
            "temperature": 0}  # fmt: skip
    plain, drafting = cluster.drafted(main, draft, 2048)
    alone = post(plain, "/infill", body).json()
    assert alone["tokens_predicted"] > 8
    for url in drafting:
        answer = post(url, "/infill", body).json()
        assert answer["content"] == alone["content"], url
        assert answer["tokens"] == alone["tokens"]
    free = drafting[1]
    assert post(free, "/infill", body).json()["timings"].get("draft_n", 0) > 0


def test_a_model_without_fim_tokens_answers_501(pair: tuple[Path, Path], cluster: Cluster) -> None:
    _, url = cluster.lead("-m", str(pair[0]), "--quiet")
    r = post(url, "/infill", fixture("llama_vim_infill"))
    assert r.status_code == 501
    assert r.json()["error"]["message"] == (
        "Infill is not supported by this model: prefix token is missing. suffix token is "
        "missing. middle token is missing. "
    )
