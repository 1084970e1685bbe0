"""The prompt of a fill-in-the-middle request, laid out as llama-server lays it out
(`format_prompt_infill`): Qwen2.5-Coder's repo-level layout (arXiv 2409.12186).

    [FIM_REP]myproject\\n               (where the vocabulary has a repo token)
    [FIM_SEP]filename0\\n chunk 0        (each of input_extra; without a file separator
    [FIM_SEP]filename1\\n chunk 1         token, "\\n\\n--- snippet ---\\n\\n" before each)
    ...
    [FIM_SEP]filename\\n
    [BOS][FIM_PRE] prefix prompt [FIM_SUF] suffix [FIM_MID]

With --spm-infill the suffix comes first: [FIM_SUF] suffix [FIM_PRE] prefix prompt
[FIM_MID]. What fits is what one batch holds, as llama-server sizes it: the prefix keeps its
last 3/4 of n_batch tokens, the suffix its first n_batch/4 less the prompt and two; the
extra chunks keep their last n_ctx - n_batch - 2 * n_predict tokens, n_predict being the
request's budget (0 if it has none), so that the answer has room (llama-server takes its
own -n, -1 by default, and may leave the answer none). /infill sizes it by -b, but never
less than FIM_BATCH, llama.cpp's editor presets' -b: duo's default -b (512) then gives an
editor the context the presets give it, and the same prompt.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from duo.llama.vocab import FimTokens

FIM_BATCH = 1024  # -b of llama.cpp's --fim-qwen-*-default and -spec presets
SNIPPET = "\n\n--- snippet ---\n\n"  # a chunk's head where there is no file separator
REPO = "myproject\n"
FILENAME = "filename\n"  # the current file's name (llama-server's placeholder)

Tokenize = Callable[[str], list[int]]  # text as tokens, no BOS, special text not parsed


@dataclass(frozen=True)
class FileChunk:
    """One of input_extra: a piece of another file."""

    text: str
    filename: str = "tmp"


def missing_tokens(fim: FimTokens) -> str:
    """What llama-server says is missing for infill ("" if nothing is)."""
    missing = [
        f"{name} token is missing. "
        for name, token in (("prefix", fim.prefix), ("suffix", fim.suffix), ("middle", fim.middle))
        if token is None
    ]
    return "".join(missing)


def infill_prompt(
    fim: FimTokens,
    tokenize: Tokenize,
    prefix: list[int],
    suffix: list[int],
    extra: Sequence[FileChunk],
    prompt: list[int],
    *,
    n_batch: int,
    n_ctx: int,
    n_predict: int = 0,
    spm: bool = False,
) -> tuple[list[int], bool]:
    """The prompt's tokens, and whether anything was cut to fit (the caller has checked
    that the prefix, suffix and middle tokens exist: missing_tokens)."""
    assert fim.prefix is not None and fim.suffix is not None and fim.middle is not None
    extra_tokens: list[int] = []
    if fim.repo is not None:
        extra_tokens += [fim.repo, *tokenize(REPO)]
    for chunk in extra:
        if fim.file_sep is not None:
            extra_tokens += [fim.file_sep, *tokenize(chunk.filename + "\n")]
        else:
            extra_tokens += tokenize(SNIPPET)
        extra_tokens += tokenize(chunk.text)
    if fim.file_sep is not None:
        extra_tokens += [fim.file_sep, *tokenize(FILENAME)]

    take_prefix = min(len(prefix), 3 * (n_batch // 4))
    take_suffix = min(len(suffix), max(0, n_batch // 4 - (2 + len(prompt))))
    take_extra = min(max(0, n_ctx - n_batch - 2 * n_predict), len(extra_tokens))
    cut = take_prefix < len(prefix) or take_suffix < len(suffix) or take_extra < len(extra_tokens)

    head = [fim.prefix, *prefix[len(prefix) - take_prefix :], *prompt]
    tail = [fim.suffix, *suffix[:take_suffix]]
    first, second = (tail, head) if spm else (head, tail)
    bos = [] if fim.bos is None else [fim.bos]
    kept = extra_tokens[len(extra_tokens) - take_extra :]
    return [*kept, *bos, *first, *second, fim.middle], cut
