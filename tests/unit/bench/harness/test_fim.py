"""`duo bench --suite fim`: an editor's fill-in-the-middle requests from the standard library."""

from __future__ import annotations

import itertools
import json
import sysconfig
from pathlib import Path

import pytest

from duo.bench.harness import fim
from duo.bench.harness.traffic import _native_piece

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def test_the_same_seed_gives_the_same_requests_and_the_holdout_others() -> None:
    first = fim.requests("fim")
    assert first == fim.requests("fim") and len(first) == fim.REQUESTS
    assert first != fim.requests("fim", seed=1)
    names = {c["filename"] for r in fim.requests("fim-holdout") for c in r["input_extra"]}
    assert not names & {c["filename"] for r in first for c in r["input_extra"]}


def test_a_request_is_a_cursor_in_a_real_file_with_chunks_of_its_package() -> None:
    for request in fim.requests("fim", count=6):
        assert set(request) == set(fim.FIELDS)
        prefix, suffix, prompt = request["input_prefix"], request["input_suffix"], request["prompt"]
        assert prefix.endswith("\n") and prefix.count("\n") <= fim.PREFIX_LINES
        assert suffix.count("\n") <= fim.SUFFIX_LINES and "\n" not in prompt
        matches = [
            f
            for package in fim.PACKAGES
            for f in (STDLIB / package).glob("*.py")
            if prefix + prompt in f.read_text(errors="replace")
        ]
        assert matches, "the prefix and the cursor's line come from a stdlib file"
        assert 1 <= len(request["input_extra"]) <= fim.CHUNKS
        for chunk in request["input_extra"]:
            assert chunk["text"].count("\n") <= fim.CHUNK_LINES
            assert chunk["filename"] != str(matches[0].relative_to(STDLIB))


def test_a_prompts_file_of_requests_is_read_and_a_bad_line_named(tmp_path: Path) -> None:
    good = tmp_path / "fim.jsonl"
    body = {"input_prefix": "a", "input_suffix": "b", "prompt": "c", "n_predict": 9}
    good.write_text(json.dumps(body) + "\n\n")
    assert fim.load(str(good)) == [body]  # n_predict too: 0 marks a warm-up
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(body) + "\n" + json.dumps({"prompt": "x"}) + "\n")
    with pytest.raises(ValueError, match=":2:"):
        fim.load(str(bad))


def test_a_native_event_s_text_and_tokens_are_read_and_the_last_one_adds_none() -> None:
    assert _native_piece({"content": "ab", "tokens": [1, 2], "stop": False}) == ("ab", 2)
    assert _native_piece({"content": "", "stop": True, "timings": {}}) == ("", 0)


def test_an_editing_session_works_down_one_file_while_its_ring_of_chunks_moves() -> None:
    session = fim.requests("fim-edit")
    assert session == fim.requests("fim-edit")
    asks = [r for r in session if r.get("n_predict") != 0]
    warm = [r for r in session if r.get("n_predict") == 0]
    assert len(asks) == fim.EDITS and warm
    assert all(r["input_prefix"] == r["input_suffix"] == r["prompt"] == "" for r in warm)
    assert len({r["input_prefix"][-200:] for r in asks}) > fim.EDITS // 2  # the cursor moves
    rings = [[c["text"] for c in r["input_extra"]] for r in asks]
    assert max(map(len, rings)) == fim.RING
    # Once the ring is full, a new chunk pushes the oldest out and the others move forward.
    changes = [(a, b) for a, b in itertools.pairwise(rings) if a != b]
    full = [(a, b) for a, b in changes if len(a) == fim.RING]
    assert full and all(b[:-1] == a[1:] for a, b in full)
    assert all(b[:-1] == a for a, b in changes if len(a) < fim.RING)
