"""Models evaluated by llama.cpp (through llama-cpp-python's C bindings), loaded here.

A `Model` owns one llama model and one context with one or more sequences (each with a
KV cache of its own). It keeps, per sequence, the list of tokens whose keys/values sit in
its KV cache, so callers can reuse a shared prefix and roll back past rejected draft
tokens:

    model.decode(tokens)  -> logits for each new token (a view, valid until next decode)
    model.truncate(n)     -> forget every KV entry at position >= n
    model.decode_batch([(seq, tokens), ...])  -> several sequences in one llama_decode

Its tokens' text and its chat template are `model.vocab` (duo.llama.vocab). Everything
else in duo talks to this small surface, so it can be tested with a fake.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from duo.core.draft import common_prefix
from duo.core.reuse import chunk_moves
from duo.core.sampling import Logits
from duo.errors import ModelError, PromptTooLong
from duo.llama import hugepages
from duo.llama.ubatch import layout
from duo.llama.vocab import Vocabulary

log = logging.getLogger(__name__)


_GGUF_MAGIC = b"GGUF"
# Cells of the KV buffer set aside per fork (`Model(forks=)`): a fork shares its prefix's
# cells and adds a short continuation of its own.
FORK_CELLS = 64
# KV cache types (-ctk, -ctv) as llama-server takes them: enum ggml_type's values.
CACHE_TYPES = {
    "f32": 0, "f16": 1, "bf16": 30, "q8_0": 8, "q4_0": 2, "q4_1": 3, "iq4_nl": 20, "q5_0": 6,
    "q5_1": 7,
}  # fmt: skip
# -sm: how a model's layers are split over several GPUs (enum llama_split_mode)
SPLIT_MODES = {"none": 0, "layer": 1, "row": 2}
MAX_DEVICES = 16  # llama_max_devices(): -ts takes no more shares than this
# Host memory for idle sequences' KV cells (Model.park): llama-server's --cache-ram default
CACHE_BYTES = 8192 * 2**20


@dataclass(frozen=True)
class Split:
    """How a model spreads over several GPUs, as llama-server's -sm, -ts and -mg say:
    by layer or by row, in these proportions (() : by free memory), the main GPU's index
    (the one GPU with -sm none)."""

    mode: str = "layer"
    tensor: tuple[float, ...] = ()
    main_gpu: int = 0


LAYER_SPLIT = Split()  # llama.cpp's default

_init_lock = threading.Lock()
_initialised = False
_log_callback: Any = None  # kept alive for as long as llama.cpp may call it


def _llama() -> Any:
    """Import llama_cpp lazily and initialise the backend once per process."""
    global _initialised, _log_callback
    import llama_cpp

    with _init_lock:
        if not _initialised:
            llama_cpp.llama_backend_init()
            _log_callback = llama_cpp.llama_log_callback(_forward_log)
            llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))
            _initialised = True
    return llama_cpp


def _forward_log(level: int, text: bytes, _user: Any) -> None:
    # llama.cpp's own log goes to DEBUG (duo -v): duo reports its failures in its own words.
    message = text.decode("utf-8", "replace").rstrip("\n")
    if message:
        log.debug("llama.cpp: %s", message)


def _address_of_logits(lib: Any) -> Callable[[Any], int | None]:
    """llama_get_logits, returning the buffer's address as an int: llama-cpp-python's
    binding returns a float pointer, which takes a cast to compare (a function object of
    its own: the binding's is left as it is)."""
    get = lib.llama_cpp._lib["llama_get_logits"]
    get.argtypes = [ctypes.c_void_p]
    get.restype = ctypes.c_void_p
    return cast(Callable[[Any], int | None], get)


class Model:
    """One GGUF model with its own context: `n_seq` sequences of up to n_ctx tokens each.
    The single-sequence methods act on sequence 0.

    Several sequences share one KV buffer of n_seq * n_ctx cells (llama.cpp's unified KV,
    llama-server's default with several slots), so every sequence always has room for its
    n_ctx tokens, and a pass over several sequences is one batch whatever each of them
    holds. With a buffer per sequence, llama.cpp splits a batch into equal parts per
    sequence, in order of sequence ID, and evaluates them one after another: a draft in
    one sequence, a piece of prompt, or an idle sequence between busy ones then costs a
    pass of its own (measured: 1+1+1+9 tokens in 91 ms split, 62 ms unified).

    The price of one buffer: each token attends over the cells of every sequence (the
    others' masked out). `shared=False` gives each sequence a buffer of its own, as
    llama-server -np N does: faster for passes without drafts, slower with them (measured
    on qwen-coder-1.5b, four clients: 1.03x on fresh chat prompts, 0.80-0.96x once the
    suffix cache drafted for several slots at once).

    But where a sequence's cells sit in a shared buffer depends on the others, and with
    them the order in which attention adds up: logits can differ in the last digits from
    the same tokens decoded alone. `deterministic` gives each sequence a buffer of its
    own, whose results do not depend on the other sequences, and keeps every micro-batch at
    two tokens or more (duo.llama.ubatch): a token's logits are then the same whatever
    else its pass holds (--deterministic)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        n_ctx: int = 4096,
        n_threads: int = 1,
        n_gpu_layers: int = 0,
        devices: ctypes.Array[ctypes.c_void_p] | None = None,
        flash_attn: str = "auto",
        cache_types: tuple[str, str] = ("f16", "f16"),
        mmap: bool = True,
        split: Split = LAYER_SPLIT,
        n_batch: int = 512,
        n_seq: int = 1,
        forks: int = 0,
        deterministic: bool = False,
        shared: bool = True,
    ) -> None:
        self.path = Path(path)
        self.n_gpu_layers = n_gpu_layers
        _check_gguf_file(self.path)
        lib = _llama()
        self._lib = lib
        self._model = self._load(devices, mmap, split)

        n_train = lib.llama_model_n_ctx_train(self._model)
        n_ctx = min(n_ctx, n_train) if n_ctx > 0 else n_train
        if forks and (deterministic or not shared):
            raise ValueError("forks share KV cells: a buffer per sequence has none to share")
        spare = 1 if deterministic else 0  # a cell per sequence for the padding
        # One KV buffer for every sequence (`shared`), unless deterministic
        self.shares_cells = shared and not deterministic and n_seq + forks > 1
        cells = (n_ctx + spare) * n_seq + FORK_CELLS * forks
        self._ctx = self._new_context(
            cells, n_batch, n_seq + forks, n_threads, flash_attn, cache_types
        )

        self.vocab = Vocabulary(lib, self._model)
        self._mem = lib.llama_get_memory(self._ctx)
        self.n_vocab = self.vocab.n_vocab
        self.deterministic = deterministic
        n_ctx_seq = (lib.llama_n_ctx_seq(self._ctx) - FORK_CELLS * forks) // (
            n_seq if self.shares_cells else 1
        )
        # llama.cpp rounds a context up (to 256 cells); a sequence holds what was asked
        self.n_ctx: int = min(n_ctx_seq - spare, n_ctx) if n_ctx > 0 else n_ctx_seq - spare
        n_batch = lib.llama_n_batch(self._ctx)  # llama.cpp may lower it to n_ctx
        self.n_batch: int = n_batch - spare * n_seq  # a token per sequence for the padding
        self._n_ubatch: int = lib.llama_n_ubatch(self._ctx)
        self.n_threads = n_threads
        # What else makes a pass faster or slower (a measured cost is this model's only)
        self.settings = [n_gpu_layers, devices is not None, flash_attn, cache_types, split]
        self.settings += [n_ctx, deterministic, self._n_ubatch, hugepages.in_effect()]
        # Per sequence, the tokens whose KV is in the cache, in order.
        self.seqs: list[list[int]] = [[] for _ in range(n_seq + forks)]
        # CPU time the calling thread spent in llama_decode (llama.cpp's worker threads,
        # with n_threads > 1, not counted): what the lead spends outside the model is the
        # process's CPU time less this.
        self.decode_cpu_seconds = 0.0
        self._batch = lib.llama_batch_init(n_batch, 0, 1)
        self._logits_address: int | None = None
        self._logits_at = _address_of_logits(lib)
        self._logits_view: Logits = np.empty((0, self.n_vocab), dtype=np.float32)
        # Sequences whose KV cells were saved to host memory and freed (park): their tokens
        # stay in self.seqs, their cells come back when the sequence is next used.
        self._parked: dict[int, ctypes.Array[ctypes.c_uint8]] = {}
        # --cache-reuse: moved runs of at least this many cached tokens are shifted into
        # place (reuse_prefix), where llama.cpp can shift this model's keys; 0: never.
        self.cache_reuse = 0
        self._can_shift = bool(lib.llama_memory_can_shift(self._mem)) and not deterministic
        # Per sequence, the cells below this position may be shared with another sequence
        # (fork): a cell has one position for all its sequences, so those are never shifted.
        self._shared = [0] * (n_seq + forks)

    def _load(self, devices: ctypes.Array[ctypes.c_void_p] | None, mmap: bool, split: Split) -> Any:
        """The llama model in self.path, its layers offloaded as asked; refused where it
        cannot roll back to a token position (recurrent, hybrid)."""
        lib = self._lib
        mparams = lib.llama_model_default_params()
        mparams.n_gpu_layers = self.n_gpu_layers
        if devices is not None:  # where its offloaded layers may go (rpc.device_list)
            mparams.devices = ctypes.cast(devices, ctypes.c_void_p)
        mparams.use_mmap = mmap
        mparams.split_mode = SPLIT_MODES[split.mode]
        mparams.main_gpu = split.main_gpu
        if split.tensor:  # kept until the model has loaded, which reads it
            proportions = (ctypes.c_float * lib.llama_max_devices())(*split.tensor[:MAX_DEVICES])
            mparams.tensor_split = proportions
        model = lib.llama_model_load_from_file(str(self.path).encode(), mparams)
        if not model:
            raise ModelError(f"llama.cpp could not load {self.path} (corrupt or unsupported GGUF)")
        if lib.llama_model_is_recurrent(model) or lib.llama_model_is_hybrid(model):
            lib.llama_model_free(model)
            raise ModelError(
                f"{self.path.name}: recurrent/hybrid models cannot roll back their state "
                "to a token position, which speculative decoding needs"
            )
        return model

    def _new_context(
        self,
        cells: int,
        n_batch: int,
        n_seq_max: int,
        n_threads: int,
        flash_attn: str,
        cache_types: tuple[str, str],
    ) -> Any:
        """A llama.cpp context on self._model with a KV buffer of `cells` cells, one buffer
        for every sequence where they share cells (self.shares_cells), else one each; the
        model is freed if none can be made."""
        lib = self._lib
        cparams = lib.llama_context_default_params()
        cparams.n_ctx = cells
        cparams.n_batch = n_batch
        cparams.n_ubatch = n_batch
        cparams.n_seq_max = n_seq_max
        cparams.kv_unified = self.shares_cells
        cparams.n_threads = n_threads
        cparams.n_threads_batch = n_threads
        cparams.no_perf = True
        cparams.flash_attn_type = {"on": 1, "off": 0, "auto": -1}[flash_attn]
        cparams.type_k, cparams.type_v = (
            getattr(lib, f"GGML_TYPE_{t.upper()}") for t in cache_types
        )
        ctx = lib.llama_init_from_model(self._model, cparams)
        if not ctx:
            lib.llama_model_free(self._model)
            raise ModelError(
                f"llama.cpp could not create a context of {cells:,} KV cells ({n_seq_max} "
                f"sequences) for {self.path.name}: too little memory? Fewer slots (-np) or a "
                "smaller context (-c) take fewer"
            )
        return ctx

    # -- lifecycle -------------------------------------------------------------------

    def close(self) -> None:
        if getattr(self, "_ctx", None):
            self._lib.llama_batch_free(self._batch)
            self._lib.llama_free(self._ctx)
            self._lib.llama_model_free(self._model)
            self._ctx = None

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def set_threads(self, n_threads: int) -> None:
        """Evaluate with this many threads from the next pass on (prompts too). llama.cpp
        splits a matrix product by rows, each row's dot product on one thread, so the
        logits do not depend on the count."""
        self._lib.llama_set_n_threads(self._ctx, n_threads, n_threads)
        self.n_threads = n_threads

    # -- evaluation ------------------------------------------------------------------

    @property
    def tokens(self) -> list[int]:
        """The tokens in sequence 0's KV cache."""
        return self.seqs[0]

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

    def sequence(self, seq: int) -> ModelSequence:
        """Sequence `seq` alone, as a model of one sequence (what the decoding loop takes)."""
        return ModelSequence(self, seq)

    def is_eog(self, token: int) -> bool:
        return self.vocab.is_eog(token)


class ModelSequence:
    """One sequence of a Model with several: decode, truncate and reuse act on it."""

    def __init__(self, model: Model, seq: int) -> None:
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


def _check_gguf_file(path: Path) -> None:
    if not path.is_file():
        raise ModelError(f"model file not found: {path}")
    with path.open("rb") as f:
        if f.read(4) != _GGUF_MAGIC:
            raise ModelError(f"{path} is not a GGUF file")


def quantize(src: Path, dst: Path, ftype: str, n_threads: int = 0) -> None:
    """Write `src` re-quantized to `ftype` (e.g. "F16", "Q3_K_M", "Q2_K") at `dst`."""
    lib = _llama()
    params = lib.llama_model_quantize_default_params()
    params.ftype = getattr(lib, f"LLAMA_FTYPE_MOSTLY_{ftype}")
    params.allow_requantize = True
    params.nthread = n_threads
    status = lib.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if status != 0:
        raise ModelError(f"quantizing {src.name} to {ftype} failed (status {status})")
