"""llama.cpp's native /completion and /infill over a scripted lead: the prompt's layout,
the answers' shapes, streams without [DONE], and bad input refused with the field named."""

from __future__ import annotations

import json
from typing import Any

import pytest

from duo.lead.native.answers import selected
from duo.lead.native.infill import FileChunk, infill_prompt, missing_tokens
from duo.llama.vocab import FimTokens
from tests.unit.lead.test_api import ScriptedLead, client, run

FIM = FimTokens(prefix=-1, suffix=-2, middle=-3, repo=-4, file_sep=-5, bos=None)
NO_FIM = FimTokens(None, None, None, None, None, None)
SCRIPTED_FIM = FimTokens(prefix=900, suffix=901, middle=902, repo=903, file_sep=904, bos=None)


def spell(text: str) -> list[int]:
    return [ord(c) for c in text]


def test_the_repo_level_layout_puts_other_files_first_then_prefix_suffix_middle() -> None:
    tokens, cut = infill_prompt(
        FIM,
        spell,
        spell("ab"),
        spell("yz"),
        [FileChunk("X", "f.py")],
        spell("c"),
        n_batch=64,
        n_ctx=256,
    )
    assert tokens == [
        -4, *spell("myproject\n"), -5, *spell("f.py\n"), *spell("X"), -5, *spell("filename\n"),
        -1, *spell("abc"), -2, *spell("yz"), -3,
    ]  # fmt: skip
    assert not cut


def test_spm_puts_the_suffix_first_and_a_bos_precedes_the_fim_tokens() -> None:
    fim = FimTokens(prefix=-1, suffix=-2, middle=-3, repo=None, file_sep=None, bos=-9)
    tokens, _ = infill_prompt(
        fim,
        spell,
        spell("ab"),
        spell("yz"),
        [FileChunk("X")],
        [],
        n_batch=64,
        n_ctx=256,
        spm=True,
    )
    assert tokens == [
        *spell("\n\n--- snippet ---\n\nX"),
        -9,
        -2,
        *spell("yz"),
        -1,
        *spell("ab"),
        -3,
    ]


def test_prefix_suffix_and_extra_are_cut_to_llama_server_s_budgets() -> None:
    # n_batch 16: the prefix keeps its last 12, the suffix its first 4 - 2 - len(prompt);
    # the extra chunks their last n_ctx - n_batch - 2 * n_predict tokens.
    tokens, cut = infill_prompt(
        FIM,
        spell,
        spell("p" * 20 + "END"),
        spell("BEG" + "s" * 20),
        [FileChunk("e" * 50)],
        spell("c"),
        n_batch=16,
        n_ctx=64,
        n_predict=10,
    )
    middle = tokens.index(-1)
    assert middle == 64 - 16 - 20  # the extra chunks' tokens kept
    assert tokens[middle:] == [-1, *spell("p" * 9 + "END" + "c"), -2, *spell("B"), -3]
    assert cut


def test_llama_server_s_message_names_each_missing_token() -> None:
    assert missing_tokens(FIM) == ""
    assert missing_tokens(NO_FIM) == (
        "prefix token is missing. suffix token is missing. middle token is missing. "
    )


def test_response_fields_keep_the_paths_that_lead_to_a_value() -> None:
    result: Any = {"content": "x", "timings": {"prompt_n": 3}, "stop": True}
    paths = ["content", "timings/prompt_n", "timings/nope", "", "content/x"]
    assert selected(result, paths) == {"content": "x", "timings/prompt_n": 3}


class FimLead(ScriptedLead):
    def __init__(self, fim: FimTokens = SCRIPTED_FIM) -> None:
        super().__init__(script=lambda job: "    return a + b", n_ctx=2048)
        self.fim = fim

    def fim_tokens(self) -> FimTokens:
        return self.fim


def post(lead: ScriptedLead, path: str, body: dict[str, Any]) -> Any:
    async def go() -> Any:
        async with client(lead) as c:
            return await c.post(path, json=body)

    return run(go())


VIM = {  # llama.vim's request (autoload/llama.vim, tests/integration/fixtures)
    "input_prefix": "def add(a, b):\n",
    "input_suffix": "\n",
    "input_extra": [{"filename": "utils.py", "time": [1796651121, 775800], "text": "x = 1\n"}],
    "prompt": "",
    "n_predict": 128,
    "n_indent": 4,
    "top_k": 40,
    "top_p": 0.9,
    "samplers": ["top_k", "top_p", "infill"],
    "stream": False,
    "cache_prompt": True,
    "t_max_prompt_ms": 500,
    "t_max_predict_ms": 250,
    "response_fields": ["content", "timings/prompt_n", "truncated", "tokens_cached"],
    "id_slot": 0,
    "model": "",
}


def test_an_infill_runs_one_job_with_the_editor_s_settings() -> None:
    lead = FimLead()
    r = post(lead, "/infill", VIM)
    assert r.status_code == 200, r.text
    (job,) = lead.jobs
    assert r.json() == {
        "content": "    return a + b",
        "timings/prompt_n": len(job.prompt),
        "truncated": False,
        "tokens_cached": 0,
    }
    assert job.prompt[-1] == 902 and job.max_tokens == 128 and job.slot == 0
    assert job.sampling.samplers == ("top_k", "top_p", "infill")
    assert job.limits is not None and job.limits.n_indent == 4
    assert job.limits.t_max_predict_ms == 250


def test_n_cmpl_answers_an_array_in_index_order_each_seeded_apart() -> None:
    lead = FimLead()
    r = post(lead, "/infill", {**VIM, "n_cmpl": 3, "seed": 7, "response_fields": None})
    assert [a["index"] for a in r.json()] == [0, 1, 2]
    assert [job.sampling.seed for job in lead.jobs] == [7, 8, 9]
    assert r.json()[0]["stop_type"] == "eos" and r.json()[0]["stop"] is True


def test_a_model_without_fim_tokens_gets_501_with_llama_server_s_message() -> None:
    r = post(FimLead(NO_FIM), "/infill", VIM)
    assert r.status_code == 501
    assert r.json()["error"]["message"].startswith("Infill is not supported by this model:")


@pytest.mark.parametrize(
    "field, value",
    [
        ("input_extra", {"text": "x"}),
        ("input_extra", [{"filename": "a.py"}]),
        ("input_extra", [{"text": 3}]),
        ("input_extra", [{"text": "x", "filename": 1}]),
        ("input_prefix", 5),
        ("n_indent", -1),
        ("samplers", ["top_q"]),
        ("n_cmpl", 0),
        ("id_slot", "0"),
    ],
)
def test_bad_infill_fields_get_400_naming_the_field(field: str, value: Any) -> None:
    r = post(FimLead(), "/infill", {**VIM, field: value})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == field


def test_infill_needs_a_prefix_and_a_suffix() -> None:
    body = {k: v for k, v in VIM.items() if k != "input_suffix"}
    r = post(FimLead(), "/infill", body)
    assert r.status_code == 400 and r.json()["error"]["param"] == "input_suffix"


def test_a_completion_answers_in_llama_cpp_s_shape() -> None:
    lead = FimLead()
    r = post(lead, "/completion", {"prompt": "hi", "n_predict": 8, "stop": ["x"]})
    body = r.json()
    assert body["content"] == "    return a + b"
    assert body["stop"] is True and body["stop_type"] == "eos" and body["stopping_word"] == ""
    assert body["tokens_evaluated"] == 2 and body["generation_settings"]["n_predict"] == 8
    for key in ("tokens", "id_slot", "tokens_predicted", "tokens_cached", "timings", "prompt"):
        assert key in body
    assert lead.jobs[0].max_tokens == 8


def test_several_prompts_get_an_answer_each_and_ids_mixed_with_text_are_one_prompt() -> None:
    lead = FimLead()
    r = post(lead, "/completion", {"prompt": ["a", [5, "b"]], "n_predict": 2})
    assert [a["index"] for a in r.json()] == [0, 1]
    assert [job.prompt for job in lead.jobs] == [[ord("a") + 1], [5, ord("b") + 1]]
    lead = FimLead()
    post(lead, "/completions", {"prompt": [5, "b", 6], "n_predict": 2})
    assert [job.prompt for job in lead.jobs] == [[5, ord("b") + 1, 6]]


@pytest.mark.parametrize("prompt", [[], [5, [6]], [{"x": 1}], 3])
def test_a_bad_prompt_gets_400(prompt: Any) -> None:
    r = post(FimLead(), "/completion", {"prompt": prompt})
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"


def test_a_native_stream_ends_with_a_stop_event_and_no_done() -> None:
    r = post(FimLead(), "/completion", {"prompt": "hi", "stream": True})
    lines = [line for line in r.text.split("\n") if line]
    assert all(line.startswith("data: ") for line in lines)
    events = [json.loads(line[6:]) for line in lines]
    assert "".join(e["content"] for e in events) == "    return a + b"
    assert [e["stop"] for e in events] == [False] * (len(events) - 1) + [True]
    assert events[-1]["content"] == "" and events[-1]["stop_type"] == "eos"


def test_n_predict_0_is_a_warm_up() -> None:
    lead = FimLead()
    post(lead, "/infill", {**VIM, "n_predict": 0})
    assert lead.jobs[0].max_tokens == 0


def test_a_grammar_too_long_or_malformed_gets_400_naming_it() -> None:
    r = post(FimLead(), "/completion", {"prompt": "hi", "grammar": "x" * (600 * 1024)})
    assert r.status_code == 400 and r.json()["error"]["param"] == "grammar"


def test_infill_budgets_are_the_editor_presets_at_least_whatever_b_is() -> None:
    lead = FimLead()  # -b 512: a prefix budget of 384 tokens, were it not for the presets'
    prefix = "p" * 700
    post(lead, "/infill", {**VIM, "input_prefix": prefix, "input_extra": []})
    assert lead.info.n_batch == 512
    prompt = lead.jobs[0].prompt
    after = prompt[prompt.index(SCRIPTED_FIM.prefix) + 1 :]
    assert after.count(ord("p") + 1) == 700  # whole: within 3/4 of 1024
