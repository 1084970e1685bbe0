"""Models evaluated by llama.cpp (through llama-cpp-python's C bindings), loaded here.

A `Model` owns one llama model and one context with one or more sequences (each with a
KV cache of its own). It keeps, per sequence, the list of tokens whose keys/values sit in
its KV cache, so callers can reuse a shared prefix and roll back past rejected draft
tokens. This module loads it and makes its context; its passes are duo.llama.passes,
what it does to its sequences' cells duo.llama.kv:

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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from duo.errors import ModelError
from duo.llama import hugepages
from duo.llama.passes import ModelSequence, Passes
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


class Model(Passes):
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
        self._init_passes(n_batch)
        self._init_sequences(n_seq + forks)

    def _init_passes(self, n_batch: int) -> None:
        """The state duo.llama.passes keeps: its batch, its view of the logits."""
        self.decode_cpu_seconds = 0.0
        self._batch = self._lib.llama_batch_init(n_batch, 0, 1)
        self._logits_address = None
        self._logits_at = _address_of_logits(self._lib)
        self._logits_view = np.empty((0, self.n_vocab), dtype=np.float32)

    def _init_sequences(self, count: int) -> None:
        """The state duo.llama.kv keeps of `count` sequences (see there)."""
        self.seqs = [[] for _ in range(count)]
        self._parked = {}
        # --cache-reuse: moved runs of at least this many cached tokens are shifted into
        # place (reuse_prefix), where llama.cpp can shift this model's keys; 0: never.
        self.cache_reuse = 0
        can_shift = self._lib.llama_memory_can_shift(self._mem)
        self._can_shift = bool(can_shift) and not self.deterministic
        self._shared = [0] * count

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

    def sequence(self, seq: int) -> ModelSequence:
        """Sequence `seq` alone, as a model of one sequence (what the decoding loop takes)."""
        return ModelSequence(self, seq)


def _check_gguf_file(path: Path) -> None:
    if not path.is_file():
        raise ModelError(f"model file not found: {path}")
    with path.open("rb") as f:
        if f.read(4) != _GGUF_MAGIC:
            raise ModelError(f"{path} is not a GGUF file")
