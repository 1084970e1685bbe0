"""llama.cpp's sampler chain in the order a request names (llama-server's `samplers`).

A request may name the samplers and their order, as llama-server takes them: a list of
names (`["top_k", "top_p", "infill"]`, as llama.vim sends) or a string of their letters
(`"kpi"`). Each step narrows or reshapes the candidates (token IDs and their logits); the
draw then samples the softmax of what is left, as llama.cpp's `dist` sampler recomputes it
from the logits. The logit bias comes first, as llama.cpp applies it before the chain.

    penalties    repeat, frequency and presence penalties over the last repeat_last_n
    top_k        the k likeliest (0: off)
    top_p        the likeliest whose probability adds up to p (1: off)
    min_p        those at least p times as likely as the likeliest (0: off)
    temperature  logits divided by it; at 0 only the likeliest is left
    infill       llama.cpp's fill-in-the-middle sampler (`infill`, below)
    dry, top_n_sigma, typ_p, xtc
                 accepted, and no-ops: duo takes none of their parameters, and at
                 llama.cpp's defaults they change nothing

A temperature missing from the chain is not applied (llama.cpp's rule): such a chain is
never greedy, whatever `temperature` says.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from duo.errors import UsageError

Candidates = tuple[np.ndarray, np.ndarray]  # (token IDs, their float64 logits)

STEPS = ("penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc")
NAMES = (*STEPS, "temperature", "infill")
# llama.cpp's other spellings of the same samplers (common_sampler_types_from_names).
ALIASES = {
    "top-k": "top_k",
    "top-p": "top_p",
    "nucleus": "top_p",
    "min-p": "min_p",
    "typical-p": "typ_p",
    "typical": "typ_p",
    "typ-p": "typ_p",
    "typ": "typ_p",
    "temp": "temperature",
    "top-n-sigma": "top_n_sigma",
}
LETTERS = {
    "e": "penalties",
    "d": "dry",
    "s": "top_n_sigma",
    "k": "top_k",
    "y": "typ_p",
    "p": "top_p",
    "m": "min_p",
    "x": "xtc",
    "t": "temperature",
    "i": "infill",
}
# The steps that read the candidates in order of descending logit (the others do not).
ORDERED = frozenset({"top_p", "min_p", "temperature", "infill"})
INFILL_FLOOR = 0.2  # llama.cpp's first threshold for a text token to stay
MAX_SAMPLERS = 32


class ChainParams(Protocol):
    """The settings a chain reads (duo.core.sampling.SamplingParams)."""

    @property
    def samplers(self) -> tuple[str, ...] | None: ...
    @property
    def top_k(self) -> int: ...
    @property
    def top_p(self) -> float: ...
    @property
    def min_p(self) -> float: ...
    @property
    def temperature(self) -> float: ...
    @property
    def repeat_last_n(self) -> int: ...
    @property
    def repeat_penalty(self) -> float: ...
    @property
    def frequency_penalty(self) -> float: ...
    @property
    def presence_penalty(self) -> float: ...


class InfillVocab(Protocol):
    """What the infill sampler reads of the vocabulary (duo.llama.vocab.Vocabulary)."""

    def is_eog(self, token: int) -> bool: ...

    def piece(self, token: int) -> bytes: ...

    def end_token(self) -> int:
        """The token an infill that keeps no text ends with: EOT, else EOS."""
        ...


def parse_samplers(value: str | Sequence[str]) -> tuple[str, ...]:
    """A request's `samplers`, as llama-server reads them: names (with llama.cpp's other
    spellings) or a string of letters. An unknown name is refused, naming it."""
    if isinstance(value, str):
        unknown = sorted({c for c in value if c not in LETTERS})
        if unknown:
            raise UsageError(
                f"'samplers' letters must be among {''.join(LETTERS)}: not {''.join(unknown)}",
                param="samplers",
            )
        return tuple(LETTERS[c] for c in value)
    out = []
    for name in value:
        canonical = ALIASES.get(name, name)
        if canonical not in NAMES:
            raise UsageError(
                f"'samplers' names must be among {', '.join(NAMES)}: not {name!r}",
                param="samplers",
            )
        out.append(canonical)
    return tuple(out)


def run_chain(
    logits: np.ndarray,
    history: Sequence[int],
    p: ChainParams,
    vocab: InfillVocab | None,
) -> Candidates:
    """The candidates left after `p.samplers` in order, over logits already biased."""
    assert p.samplers is not None
    z = logits.astype(np.float64)
    ids = np.flatnonzero(np.isfinite(z))
    z = z[ids]
    # Sorted by descending logit only once a step needs the order: a whole vocabulary's
    # sort costs ~20 ms a token at 150k tokens, where top_k's partition costs ~1.
    ordered = False
    for name in p.samplers:
        if not len(ids):
            break
        if name == "penalties":
            ids, z = _penalties((ids, z), history, p)
            ordered = False
        elif name == "top_k":
            if 0 < p.top_k < len(ids):
                (ids, z), ordered = _top((ids, z), p.top_k), True
        elif name == "temperature" and p.temperature > 0:
            z = z / p.temperature
        elif name in ORDERED:
            if not ordered:
                (ids, z), ordered = _sorted((ids, z)), True
            ids, z = _narrowed(name, (ids, z), p, vocab)
    if not len(ids):
        raise UsageError("the samplers left no token to sample", param="samplers")
    return ids, z


def _narrowed(name: str, c: Candidates, p: ChainParams, vocab: InfillVocab | None) -> Candidates:
    """What a step that reads the candidates' order (ORDERED) leaves of them."""
    ids, z = c
    if name == "top_p" and p.top_p < 1.0:
        n = int(np.searchsorted(np.cumsum(_softmax(z)), p.top_p)) + 1
        return ids[:n], z[:n]
    if name == "min_p" and p.min_p > 0.0:
        probs = _softmax(z)
        n = max(1, int(np.count_nonzero(probs >= p.min_p * probs[0])))
        return ids[:n], z[:n]
    if name == "temperature":  # at 0: the likeliest alone
        return ids[:1], z[:1]
    if name == "infill":
        if vocab is None:
            raise UsageError("the 'infill' sampler needs the model's vocabulary")
        return infill(c, vocab)
    return c


def _top(c: Candidates, k: int) -> Candidates:
    """The k likeliest, sorted: those at or above the k-th largest logit (a partition),
    then sorted and cut, as a whole sort would cut them (ties by ascending token ID)."""
    ids, z = c
    kth = np.partition(z, len(z) - k)[len(z) - k]
    at_least = np.flatnonzero(z >= kth)
    top_ids, top_z = _sorted((ids[at_least], z[at_least]))
    return top_ids[:k], top_z[:k]


def infill(c: Candidates, vocab: InfillVocab) -> Candidates:
    """llama.cpp's infill sampler (llama_sampler_infill_apply), over candidates sorted by
    descending logit: if end-of-generation tokens are likely enough (3 * p(eog) * n >
    p(text)), only they are left; else a token whose text begins another's takes the
    other's probability (the likelier of the two keeps both), text tokens under 0.2 go,
    then those under 1 / (texts left + 1); if no text token is left, only EOT. The draw
    samples the softmax of the logits of what is left (llama.cpp's dist sampler)."""
    ids, z = c
    p = _softmax(z)
    eog = np.array([vocab.is_eog(int(t)) for t in ids], dtype=bool)
    if 3 * p[eog].sum() * len(ids) > p[~eog].sum():
        return ids[eog], z[eog]
    p = p.copy()
    alive = np.ones(len(ids), dtype=bool)
    pieces = [vocab.piece(int(t)) for t in ids]
    for i0, longer in enumerate(_extensions(pieces)):
        for i1 in longer:
            if not alive[i0]:
                break
            if not alive[i1]:
                continue
            dst, src = (i1, i0) if p[i1] > p[i0] else (i0, i1)
            p[dst] += p[src]
            p[src] = 0.0
            alive[src] = False
    keep = alive & ((p >= INFILL_FLOOR) | eog)
    texts = int(np.count_nonzero(keep & ~eog))
    if texts == 0:
        return np.array([vocab.end_token()]), np.array([1.0])
    q = np.where(keep, p, 0.0)
    q /= q.sum()
    keep &= (q >= 1.0 / (texts + 1)) | eog
    return ids[keep], z[keep]


def _extensions(pieces: list[bytes]) -> list[list[int]]:
    """For each candidate i0, in order, the other candidates i1 whose text starts with
    i0's (a non-empty text: special tokens render as none)."""
    where: dict[bytes, list[int]] = {}
    for i, piece in enumerate(pieces):
        if piece:
            where.setdefault(piece, []).append(i)
    out: list[list[int]] = [[] for _ in pieces]
    for i1, piece in enumerate(pieces):
        for n in range(1, len(piece) + 1):
            for i0 in where.get(piece[:n], ()):
                if i0 != i1:
                    out[i0].append(i1)
    for longer in out:
        longer.sort()
    return out


def _penalties(c: Candidates, history: Sequence[int], p: ChainParams) -> Candidates:
    """The penalties (penalised) on the candidates."""
    ids, z = c
    if p.repeat_last_n <= 0 or not history:
        return c
    recent, counts = np.unique(np.asarray(history[-p.repeat_last_n :]), return_counts=True)
    hit = np.isin(ids, recent)
    if not hit.any():
        return c
    z = z.copy()
    z[hit] = penalised(z[hit], counts[np.searchsorted(recent, ids[hit])], p)
    return ids, z


def penalised(values: np.ndarray, counts: np.ndarray, p: ChainParams) -> np.ndarray:
    """Logits of tokens seen `counts` times in the history, penalised as llama.cpp does,
    in their own float type: divided (if > 0) or multiplied by repeat_penalty, minus
    count * frequency_penalty, minus presence_penalty."""
    kind = values.dtype.type
    if p.repeat_penalty != 1.0:
        values = np.where(values > 0, values / p.repeat_penalty, values * p.repeat_penalty)
    freq, present = kind(p.frequency_penalty), kind(p.presence_penalty)
    out: np.ndarray = values - (counts.astype(values.dtype) * freq + present)
    return out


def _sorted(c: Candidates) -> Candidates:
    """By descending logit, then ascending token ID (llama.cpp sorts by logit)."""
    ids, z = c
    order = np.lexsort((ids, -z))
    return ids[order], z[order]


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max())
    out: np.ndarray = e / e.sum()
    return out
