"""A scripted stand-in for duo.llama.backend.Model: a tiny deterministic language model.

The "model" predicts the next token from the last two tokens with a fixed table, so a
draft model is simply the same table with some entries changed (it agrees often, but not
always, like a quantized copy).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from duo.core.choice import Chooser
from duo.core.draft import Draft
from duo.core.prompt import Prefill
from duo.core.rounds import DraftSource, Generation, MainModel, Round, run
from duo.core.sampling import Sampler

N_VOCAB = 16


def table_model(seed: int) -> dict[tuple[int, int], int]:
    rng = np.random.default_rng(seed)
    return {(a, b): int(rng.integers(1, N_VOCAB)) for a in range(N_VOCAB) for b in range(N_VOCAB)}


def corrupted(
    table: dict[tuple[int, int], int], fraction: float, seed: int
) -> dict[tuple[int, int], int]:
    rng = np.random.default_rng(seed)
    out = dict(table)
    for key in out:
        if rng.random() < fraction:
            out[key] = int(rng.integers(1, N_VOCAB))
    return out


def soft_logits(history: Sequence[int]) -> np.ndarray:
    """Deterministic, context-dependent logits (from the last two tokens)."""
    a = history[-2] if len(history) > 1 else 0
    rng = np.random.default_rng(1000 + 31 * a + history[-1])
    return (1.5 * rng.standard_normal(N_VOCAB)).astype(np.float32)


class FakeModel:
    """Implements the parts of Model the engine and drafter use."""

    def __init__(
        self,
        table: dict[tuple[int, int], int],
        *,
        n_ctx: int = 512,
        eog: int | None = None,
        soft: bool = False,
        runner_up: dict[tuple[int, int], int] | None = None,
    ):
        self.table = table
        self.soft = soft  # soft: a full distribution per context, for sampling tests
        # sure of its next token (p ~0.8), or unsure between it and runner_up's (0.6/0.2)
        self.runner_up = runner_up
        self.n_ctx = n_ctx
        self.n_vocab = N_VOCAB
        self.tokens: list[int] = []
        self.eog = eog
        self.decode_calls: list[int] = []

    def next_token(self, history: Sequence[int]) -> int:
        a = history[-2] if len(history) > 1 else 0
        return self.table[(a, history[-1])]

    def decode(self, tokens: Sequence[int], *, all_logits: bool = True) -> np.ndarray:
        self.decode_calls.append(len(tokens))
        rows = []
        for token in tokens:
            self.tokens.append(token)
            row = soft_logits(self.tokens) if self.soft else np.zeros(N_VOCAB, dtype=np.float32)
            if self.runner_up is not None:
                a = self.tokens[-2] if len(self.tokens) > 1 else 0
                row[self.runner_up[(a, token)]] = 3.0
                row[self.next_token(self.tokens)] = 4.0
            elif not self.soft:
                row[self.next_token(self.tokens)] = 1.0
            rows.append(row)
        return np.stack(rows if all_logits else rows[-1:])

    def truncate(self, n: int) -> None:
        del self.tokens[n:]

    def reuse_prefix(self, tokens: Sequence[int]) -> int:
        n = 0
        while n < min(len(tokens), len(self.tokens)) and tokens[n] == self.tokens[n]:
            n += 1
        self.truncate(n)
        return n

    def is_eog(self, token: int) -> bool:
        return token == self.eog


def reference(table: dict[tuple[int, int], int], prompt: Sequence[int], n: int) -> list[int]:
    """What the main model alone produces, computed directly from the table."""
    seq = list(prompt)
    for _ in range(n):
        a = seq[-2] if len(seq) > 1 else 0
        seq.append(table[(a, seq[-1])])
    return seq[len(prompt) :]


class FakeBatchModel:
    """Several FakeModels as the sequences of one model, evaluated in one pass."""

    def __init__(self, seqs: list[FakeModel]) -> None:
        self.seqs = seqs
        self.n_vocab = N_VOCAB
        self.n_batch = 512
        self.passes: list[list[int]] = []  # per pass, the tokens of each part
        self.parked: list[tuple[int, int]] = []  # (sequence, limit) of each park

    def sequence(self, seq: int) -> FakeModel:
        return self.seqs[seq]

    def park(self, seq: int, limit: int) -> bool:
        self.parked.append((seq, limit))
        return True

    def fork(self, src: int, dst: int, n: int) -> None:
        self.seqs[dst].tokens = self.seqs[src].tokens[:n]

    def decode_batch(
        self,
        parts: Sequence[tuple[int, Sequence[int]]],
        prefill: Sequence[tuple[int, Sequence[int]]] = (),
    ) -> list[np.ndarray]:
        self.passes.append([len(tokens) for _, tokens in parts])
        for seq, tokens in prefill:
            self.seqs[seq].decode(tokens, all_logits=False)
        return [self.seqs[seq].decode(tokens) for seq, tokens in parts]


def generate(
    main: MainModel,
    prompt: Sequence[int],
    *,
    max_tokens: int,
    drafts: DraftSource | None = None,
    draft_max: int = 8,
    sampler: Sampler | None = None,
    policy: Chooser | None = None,
    on_prefill: Callable[[Prefill], None] | None = None,
) -> Iterator[Round]:
    """Evaluate the prompt, then decode up to `max_tokens` tokens, round by round."""
    g = Generation(
        main,
        prompt,
        max_tokens=max_tokens,
        drafts=drafts,
        draft_max=draft_max,
        sampler=sampler,
        policy=policy,
    )
    return run(main, g, on_prefill)


class Published:
    """Drafts published by a worker, by key, and a way to wait for one."""

    def __init__(self) -> None:
        self.drafts: dict[int, list[Draft]] = {}
        self.branches: dict[int, list[tuple[Draft, ...]]] = {}
        self.cv = threading.Condition()

    def __call__(self, key: int, d: Draft, branches: tuple[Draft, ...] = ()) -> None:
        with self.cv:
            self.drafts.setdefault(key, []).append(d)
            self.branches.setdefault(key, []).append(branches)
            self.cv.notify_all()

    def wait_for_branch(self, key: int, path: tuple[int, ...]) -> Draft:
        """The first branch published that starts with `path`."""

        def found() -> Draft | None:
            every = (b for bs in self.branches.get(key, []) for b in bs)
            return next((b for b in every if b.tokens[: len(path)] == path), None)

        with self.cv:
            assert self.cv.wait_for(lambda: found() is not None, timeout=5)
            branch = found()
            assert branch is not None
            return branch

    def wait_for(self, key: int, n_committed: int, length: int, timeout: float = 5) -> Draft:
        """The first draft published after `n_committed` tokens with `length` or more."""

        def found() -> Draft | None:
            ok = [d for d in self.drafts.get(key, []) if d.start == n_committed]
            return next((d for d in ok if len(d.tokens) >= length), None)

        with self.cv:
            assert self.cv.wait_for(lambda: found() is not None, timeout=timeout)
            draft = found()
            assert draft is not None
            return draft
