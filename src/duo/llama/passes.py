"""A model's passes: tokens appended to one sequence or several in one llama_decode, and
the logits they compute, as views into llama.cpp's buffer.

`Passes` is a part of duo.llama.backend.Model (the state it reads is set up there);
`ModelSequence` is one sequence of a Model, as the decoding loop takes it.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from duo.core.sampling import Logits
from duo.errors import ModelError, PromptTooLong
from duo.llama.kv import Sequences
from duo.llama.ubatch import layout
from duo.llama.vocab import Vocabulary


class Passes(Sequences):
    """The passes of a Model over its sequences (its state, set in Model.__init__)."""

    n_ctx: int
    n_batch: int
    n_vocab: int
    deterministic: bool
    _n_ubatch: int
    _batch: Any
    # CPU time the calling thread spent in llama_decode (llama.cpp's worker threads,
    # with n_threads > 1, not counted): what the lead spends outside the model is the
    # process's CPU time less this.
    decode_cpu_seconds: float
    _logits_address: int | None
    _logits_at: Callable[[Any], int | None]
    _logits_view: Logits
    vocab: Vocabulary

    def is_eog(self, token: int) -> bool:
        return self.vocab.is_eog(token)

    def decode(self, tokens: Sequence[int], *, all_logits: bool = True, seq: int = 0) -> Logits:
        """Append `tokens` to sequence `seq`'s KV cache; return logits of shape (rows, n_vocab).

        With all_logits, one row per token (row i predicts the token after tokens[i]);
        otherwise only the last token's row. The array is a view into llama.cpp's
        buffer: use it before the next decode.
        """
        if not tokens:
            raise ValueError("decode needs at least one token")
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            last = start + self.n_batch >= len(tokens)
            flags = [all_logits] * len(chunk)
            flags[-1] = all_logits or last
            (row,) = self._pass([(seq, chunk, flags)])
        return self._logits(row, len(chunk) if all_logits else 1)

    def decode_batch(
        self,
        parts: Sequence[tuple[int, Sequence[int]]],
        prefill: Sequence[tuple[int, Sequence[int]]] = (),
    ) -> list[Logits]:
        """Append tokens to several sequences in one pass, logits for every position:
        [(seq, tokens), ...] -> one array of rows per part, in order (views, as decode's).
        `prefill` parts ride along without logits (pieces of prompts); one for a sequence
        that also has a part goes before that part's tokens (the end of a prompt, then the
        first round). All the tokens together must fit one batch (n_batch)."""
        every = [*parts, *prefill]
        total = sum(len(tokens) for _, tokens in every)
        if not 0 < total <= self.n_batch or not all(tokens for _, tokens in every):
            raise ValueError(f"a batch holds 1 to {self.n_batch} tokens, none empty")
        lead, decoding = dict(prefill), {seq for seq, _ in parts}
        if len(lead) < len(prefill) or len(decoding) < len(parts):
            raise ValueError("a batch holds one part and one piece of prompt per sequence")
        rows = self._pass(
            [
                (seq, [*lead.get(seq, ()), *tokens], _flags(lead.get(seq, ()), tokens))
                for seq, tokens in parts
            ]
            + [(seq, tokens, _flags(tokens, ())) for seq, tokens in prefill if seq not in decoding]
        )
        return [
            self._logits(row, len(tokens))
            for row, (_, tokens) in zip(rows[: len(parts)], parts, strict=True)
        ]

    def _pass(self, parts: Sequence[tuple[int, Sequence[int], Sequence[bool]]]) -> list[int]:
        """One llama_decode of `parts` [(seq, tokens, whether each computes logits), ...]:
        for each part, the row of its first logits in llama.cpp's buffer. A deterministic
        model lays the batch out with padding tokens and extra rows (duo.llama.ubatch),
        whose KV cells are removed after the pass."""
        wanted: Sequence[Sequence[bool]] = (
            layout([(seq, flags) for seq, _, flags in parts], self._n_ubatch)
            if self.deterministic
            else [flags for _, _, flags in parts]
        )
        batch, i, row, first = self._batch, 0, 0, []
        for (seq, tokens, asked), flags in zip(parts, wanted, strict=True):
            if seq in self._parked and not self._unpark(seq):
                raise ModelError(f"no room in the KV buffer to restore sequence {seq}")
            known = len(self.seqs[seq])
            if known + len(tokens) > self.n_ctx:
                raise PromptTooLong(
                    f"{known + len(tokens)} tokens do not fit the context of {self.n_ctx}"
                )
            first.append(row + sum(flags[: asked.index(True) if any(asked) else 0]))
            for j, flag in enumerate(flags):
                batch.token[i] = tokens[min(j, len(tokens) - 1)]
                batch.pos[i] = known + j
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = seq
                batch.logits[i] = flag
                i += 1
            row += sum(flags)
        batch.n_tokens = i
        cpu = time.thread_time()
        status = self._lib.llama_decode(self._ctx, batch)
        self.decode_cpu_seconds += time.thread_time() - cpu
        for (seq, tokens, _), flags in zip(parts, wanted, strict=True):
            if status == 0:
                self.seqs[seq].extend(tokens)
            if status != 0 or len(flags) > len(tokens):  # leftover or padding cells
                self._lib.llama_memory_seq_rm(self._mem, seq, len(self.seqs[seq]), -1)
        if status != 0:
            raise ModelError(f"llama_decode failed with status {status}")
        return first

    def _logits(self, start: int, rows: int) -> Logits:
        """Rows start to start + rows of llama.cpp's logits buffer, as a view. Making a
        view costs tens of microseconds (numpy builds a ctypes array type), a round's share
        of the lead's time outside the model: the view is kept while the buffer stays put
        (it moves only when llama.cpp grows it), and only the rows written are read."""
        address = self._logits_at(self._ctx)
        end = start + rows
        if address != self._logits_address or end > len(self._logits_view):
            if address is None:
                raise ModelError("llama.cpp has no logits for this pass")
            shape = (max(end, self.n_batch), self.n_vocab)
            pointer = ctypes.cast(address, ctypes.POINTER(ctypes.c_float))
            self._logits_view = np.ctypeslib.as_array(pointer, shape=shape)
            self._logits_address = address
        return self._logits_view[start:end]


class ModelSequence:
    """One sequence of a Model with several: decode, truncate and reuse act on it."""

    def __init__(self, model: Passes, seq: int) -> None:
        self.model = model
        self.seq = seq
        self.n_ctx = model.n_ctx
        self.n_batch = model.n_batch

    @property
    def tokens(self) -> list[int]:
        return self.model.seqs[self.seq]

    def decode(self, tokens: Sequence[int], *, all_logits: bool = True) -> Logits:
        return self.model.decode(tokens, all_logits=all_logits, seq=self.seq)

    def truncate(self, n: int) -> None:
        self.model.truncate(n, self.seq)

    def reuse_prefix(self, tokens: Sequence[int]) -> int:
        return self.model.reuse_prefix(tokens, self.seq)

    def is_eog(self, token: int) -> bool:
        return self.model.is_eog(token)


def _flags(prompt: Sequence[int], tokens: Sequence[int]) -> list[bool]:
    """Which tokens of a part compute logits: none of its prompt tokens, every other one."""
    return [False] * len(prompt) + [True] * len(tokens)
