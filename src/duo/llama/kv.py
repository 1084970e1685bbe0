"""A model's KV sequences: the tokens each one's cells hold, and what can be done to them
without a pass: truncate, reuse a prefix (and, with --cache-reuse, moved chunks), fork one
from another (cells shared in one buffer), park idle ones in host memory and restore them.

`Sequences` is a part of duo.llama.backend.Model (the state it reads is set up there).
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Sequence
from typing import Any

from duo.core.draft import common_prefix
from duo.core.reuse import chunk_moves
from duo.errors import ModelError

log = logging.getLogger(__name__)


class Sequences:
    """The KV sequences of a Model (its state, set in Model.__init__)."""

    _lib: Any
    _ctx: Any
    _mem: Any
    seqs: list[list[int]]  # per sequence, the tokens whose KV is in the cache, in order
    shares_cells: bool
    cache_reuse: int
    _can_shift: bool
    # Sequences whose KV cells were saved to host memory and freed (park): their tokens
    # stay in self.seqs, their cells come back when the sequence is next used.
    _parked: dict[int, ctypes.Array[ctypes.c_uint8]]
    # Per sequence, the cells below this position may be shared with another sequence
    # (fork): a cell has one position for all its sequences, so those are never shifted.
    _shared: list[int]

    @property
    def tokens(self) -> list[int]:
        """The tokens in sequence 0's KV cache."""
        return self.seqs[0]

    def truncate(self, n: int, seq: int = 0) -> None:
        """Forget sequence `seq`'s KV entries at positions >= n."""
        tokens = self.seqs[seq]
        if n == 0 and self._parked.pop(seq, None) is not None:
            tokens.clear()
            return
        self._unpark(seq)
        if n >= len(tokens):
            return
        if not self._lib.llama_memory_seq_rm(self._mem, seq, n, -1):
            raise ModelError("llama.cpp refused to remove part of the KV cache")
        del tokens[n:]
        self._shared[seq] = min(self._shared[seq], n)

    def reuse_prefix(self, tokens: Sequence[int], seq: int = 0) -> int:
        """Keep the longest KV prefix of sequence `seq` shared with `tokens`, and with
        cache_reuse the moved runs of its cache that `tokens` holds again, shifted into
        place after it (duo.core.reuse); return how many of `tokens` the cache holds."""
        self._unpark(seq)
        cached = self.seqs[seq]
        n = common_prefix(cached, tokens)
        if self.cache_reuse > 0 and self._can_shift:
            for move in chunk_moves(cached, tokens, n, self.cache_reuse, self._shared[seq]):
                self._shift(seq, move.src, move.dst, move.n)
                n = move.dst + move.n
        self.truncate(n, seq)
        return len(self.seqs[seq])  # none, if a parked sequence found no room again

    def _shift(self, seq: int, src: int, dst: int, n: int) -> None:
        """Sequence `seq`'s cells [src, src + n) moved to [dst, dst + n), dst <= src,
        the cells between dropped (llama-server's cache reuse)."""
        lib, mem = self._lib, self._mem
        lib.llama_memory_seq_rm(mem, seq, dst, src)
        lib.llama_memory_seq_add(mem, seq, src, src + n, dst - src)
        tokens = self.seqs[seq]
        tokens[dst : dst + n] = tokens[src : src + n]
        # The cells past dst + n hold stale tokens' keys until reuse_prefix truncates.

    def fork(self, src: int, dst: int, n: int) -> None:
        """Sequence `dst` becomes the first n tokens of sequence `src`. In one buffer their
        KV cells are shared, not copied, so a fork costs only the cells it adds; with a
        buffer each, llama.cpp copies src's whole buffer into dst's before the next pass
        (a memory copy, far less than reading the tokens again), and dst keeps n."""
        self.truncate(0, dst)
        if n and src in self._parked:  # src's saved cells are copied in; src stays parked
            self._restore(src, dst)
            self.truncate(n, dst)
            return
        if n and self.shares_cells:
            self._lib.llama_memory_seq_cp(self._mem, src, dst, 0, n)
            self._shared[src] = max(self._shared[src], n)
            self._shared[dst] = n
        elif n:
            self._lib.llama_memory_seq_cp(self._mem, src, dst, -1, -1)
            self._lib.llama_memory_seq_rm(self._mem, dst, n, -1)
        self.seqs[dst] = self.seqs[src][:n]

    def park(self, seq: int, limit: int) -> bool:
        """Save sequence `seq`'s KV cells to host memory and free them, unless the parked
        sequences would then take more than `limit` bytes; whether it was parked. Its
        tokens stay listed, and its cells come back the next time it is used (decoded,
        truncated or forked from): a memory copy, far less than reading the tokens again.

        In one KV buffer, every token attends over every cell below the highest one in use,
        the other sequences' masked out: an idle sequence's cells slow every pass of the
        others (a one-token pass of qwen-coder-1.5b on 2 cores with 1,000 tokens in each of
        three idle slots took 1.16x as long). llama-server saves idle slots to its prompt
        cache in host memory and clears them for the same reason (--cache-idle-slots). With
        a buffer per sequence there is nothing to gain, and nothing is parked."""
        tokens = self.seqs[seq]
        if not self.shares_cells or not tokens or seq in self._parked:
            return False
        lib = self._lib
        size = lib.llama_state_seq_get_size(self._ctx, seq)
        if size + self.parked_bytes > limit:
            return False
        saved = (ctypes.c_uint8 * size)()
        if lib.llama_state_seq_get_data(self._ctx, saved, size, seq) != size:
            return False
        lib.llama_memory_seq_rm(self._mem, seq, -1, -1)
        self._parked[seq] = saved
        return True

    @property
    def parked_bytes(self) -> int:
        return sum(len(saved) for saved in self._parked.values())

    def _unpark(self, seq: int) -> bool:
        """Sequence `seq`'s cells back in the KV buffer, if they were parked; False if
        they found no room (its tokens are then forgotten)."""
        if seq in self._parked:
            self._restore(seq, seq)
            del self._parked[seq]
            return bool(self.seqs[seq])
        return True

    def _restore(self, src: int, dst: int) -> None:
        """Parked sequence src's cells into sequence dst's, which holds none. With no room
        in the buffer, dst is left empty: its tokens are read again."""
        saved = self._parked[src]
        tokens = self.seqs[src][:]
        self._shared[dst] = 0  # restored cells are its own
        if self._lib.llama_state_seq_set_data(self._ctx, saved, len(saved), dst) != len(saved):
            log.warning("no room to restore a parked sequence of %d tokens", len(tokens))
            self._lib.llama_memory_seq_rm(self._mem, dst, -1, -1)
            tokens = []
        self.seqs[dst][:] = tokens
