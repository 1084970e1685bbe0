"""llama.cpp's native requests as typed models: POST /completion (and /completions) and
POST /infill, with llama-server's field names and defaults.

    NativeSampling   what both take: n_predict, n_probs, n_cmpl, the sampler chain
                     (`samplers`), an editor's limits (n_indent, t_max_predict_ms), the
                     slot (id_slot, cache_prompt) and response_fields; with the OpenAI
                     fields duo.lead.openai.requests.Sampling already reads
    CompletionBody   /completion: a prompt (text, token IDs, both mixed, or a list of them)
    InfillBody       /infill: input_prefix, input_suffix, input_extra and prompt

A wrongly typed field is refused with its name (llama-server ignores it and goes on with its
default); `t_max_prompt_ms` is accepted and unused, as llama-server leaves it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, cast

from msgspec import Meta

from duo.core.chain import MAX_SAMPLERS, parse_samplers
from duo.core.logprobs import MAX_TOP_LOGPROBS
from duo.core.sampling import SamplingParams
from duo.errors import UsageError
from duo.lead.body import Fields, TokenId, filled
from duo.lead.openai.requests import MAX_CHOICES, Sampling
from duo.llama.grammar import MAX_GRAMMAR_BYTES

MAX_PROMPTS = MAX_CHOICES  # prompts in one /completion request
MAX_PROMPT_ITEMS = 1 << 20  # texts and token IDs in one prompt
MAX_EXTRA = 1024  # chunks of input_extra (llama.vscode keeps 16 by default)
MAX_FIELDS = 64  # response_fields

Part = str | TokenId
SubPrompt = str | list[Part]


class NativeSampling(Sampling, kw_only=True):
    """The fields /completion and /infill share (on top of Sampling's)."""

    n_predict: Annotated[
        Annotated[int, Meta(ge=-1)] | None,
        Meta(
            description="the most tokens to generate; -1: until the end or the context is "
            "full; 0: read the prompt into the slot's cache and answer nothing (a warm-up)"
        ),
    ] = None
    n_probs: Annotated[
        Annotated[int, Meta(ge=0, le=MAX_TOP_LOGPROBS)] | None,
        Meta(
            description="completion_probabilities: each token's logprob and this many "
            "alternatives (0: none)"
        ),
    ] = 0
    n_cmpl: Annotated[
        Annotated[int, Meta(ge=1, le=MAX_CHOICES)] | None,
        Meta(
            description="completions of each prompt (`n` too); with a seed s, the i-th "
            "samples with seed s + i"
        ),
    ] = None
    stream: Annotated[
        bool | None,
        Meta(description="server-sent events, the last one with stop: true (no [DONE])"),
    ] = False
    id_slot: Annotated[
        Annotated[int, Meta(ge=-1)] | None,
        Meta(
            description="the slot to run in, if it is free (-1: the one whose cache "
            "shares most with the prompt)"
        ),
    ] = -1
    cache_prompt: Annotated[
        bool | None, Meta(description="keep what the slot's cache shares with the prompt")
    ] = True
    samplers: Annotated[
        Annotated[list[str], Meta(max_length=MAX_SAMPLERS)]
        | Annotated[str, Meta(max_length=MAX_SAMPLERS)]
        | None,
        Meta(
            description="the sampler chain in order, as names or letters (duo.core.chain; "
            '"infill" is llama.cpp\'s fill-in-the-middle sampler); none: the default order'
        ),
    ] = None
    n_indent: Annotated[
        Annotated[int, Meta(ge=0)] | None,
        Meta(
            description="every line after the first is indented at least this much, or "
            "the text ends there"
        ),
    ] = 0
    t_max_predict_ms: Annotated[
        float | None,
        Meta(
            description="after this long generating, the text ends at its next newline (<= 0: off)"
        ),
    ] = -1
    t_max_prompt_ms: Annotated[
        float | None, Meta(description="accepted and unused, as by llama-server")
    ] = -1
    response_fields: Annotated[
        Annotated[list[str], Meta(max_length=MAX_FIELDS)] | None,
        Meta(description='only these fields of the answer; "a/b" is field b of field a'),
    ] = None
    return_tokens: Annotated[
        bool | None, Meta(description="accepted: `tokens` always holds the tokens")
    ] = False
    grammar: Annotated[
        Annotated[str, Meta(max_length=MAX_GRAMMAR_BYTES)] | None,
        Meta(description="GBNF the text must follow (llama.cpp's grammars)"),
    ] = None

    def max_new_tokens(self, n_ctx: int) -> int:
        """n_predict, else max_completion_tokens or max_tokens (-1 or none: the context)."""
        wanted = self.n_predict
        if wanted is None:
            wanted = self.max_completion_tokens or self.max_tokens
        return n_ctx if wanted is None or wanted < 0 else min(wanted, n_ctx)

    def completions(self) -> int:
        return self.n_cmpl or filled(self.n)

    def sampling(self, n_ctx: int, n_vocab: int) -> SamplingParams:
        params = super().sampling(n_ctx, n_vocab)
        chain = None if self.samplers is None else parse_samplers(self.samplers)
        return replace(params, samplers=chain, grammar=self.grammar or None)

    def logprobs_wanted(self) -> int | None:
        return filled(self.n_probs) or None


class CompletionBody(NativeSampling, kw_only=True):
    """POST /completion: llama.cpp's native completion."""

    prompt: Annotated[
        str | Annotated[list[Part | list[Part]], Meta(max_length=MAX_PROMPT_ITEMS)],
        Meta(
            description="text; token IDs, or texts and token IDs mixed (one prompt, BOS "
            "before a first text); or a list of such prompts (an answer each)"
        ),
    ]

    def prompts(self) -> list[SubPrompt]:
        """Each prompt: a list holding token IDs is one prompt; else each item is one."""
        prompt = self.prompt
        if isinstance(prompt, str):
            return [prompt]
        if not prompt:
            raise UsageError("'prompt' must not be empty", param="prompt")
        if any(isinstance(p, int) for p in prompt):
            if any(isinstance(p, list) for p in prompt):
                raise UsageError(
                    "'prompt' mixes token IDs with lists: one prompt holds texts and token "
                    "IDs, a list of prompts holds texts and lists",
                    param="prompt",
                )
            return [cast(list[Part], prompt)]
        if len(prompt) > MAX_PROMPTS:
            raise UsageError(f"'prompt' may hold at most {MAX_PROMPTS} prompts", param="prompt")
        return [p for p in prompt if isinstance(p, str | list)]


class ExtraChunk(Fields, kw_only=True):
    """A piece of another file, as an editor sends it (more fields, such as llama.vim's
    `time`, are ignored)."""

    text: str
    filename: Annotated[str | None, Meta(description="its file's name")] = "tmp"


class InfillBody(NativeSampling, kw_only=True):
    """POST /infill: fill in the middle, as llama.vim and llama.vscode ask."""

    input_prefix: Annotated[SubPrompt, Meta(description="the text before the cursor")]
    input_suffix: Annotated[SubPrompt, Meta(description="the text after the cursor")]
    input_extra: Annotated[
        Annotated[list[ExtraChunk], Meta(max_length=MAX_EXTRA)] | None,
        Meta(description="pieces of other files, [{text, filename}], the most relevant last"),
    ] = None
    prompt: Annotated[
        str | None, Meta(description="text the middle starts with (after the prefix)")
    ] = ""
