#!/usr/bin/env python3
"""Write a synthetic Llama GGUF: real shapes and Llama 3's vocabulary, random weights.

    scripts/gpu/synth.py --shape llama3-8b -o main.gguf              # 16 GB at F16
    scripts/gpu/synth.py --shape llama3.2-1b --agree 0.75 -o draft.gguf
    scripts/gpu/synth.py --shape tiny -o tiny.gguf                   # 35 MB, for CPU tests

For a machine that cannot download a model (the rented GPU box): a pass over these files
costs what it costs over the real models of that shape, so they time llama.cpp and duo
honestly, and every file written here has the same vocabulary (read from the
ggml-vocab-llama-bpe.gguf that llama.cpp's sources carry), so any two pass duo's
vocabulary check and pair as main and draft.

The weights are random, with one structure so that greedy decoding is well defined and
the same on every backend: each token's embedding is a random vector, and the output
matrix scores token j by the embedding of the token a fixed random permutation maps to j
(`--map-seed`, over the vocabulary's plain words). The layers' weights are small, so the
last hidden state stays close to the current token's embedding and greedy decoding walks
the permutation's cycle with a wide margin between the best and second logit (no near
ties for another backend or batch size to flip). A draft written with `--agree F` follows
the same permutation on a fraction F of the words and another one elsewhere: its drafts
are accepted at about that rate. The prompt's last token should be a plain word (the
texts in scripts/gpu/check.py are).

gguf-py is imported from llama.cpp's vendored sources (--llama-src, $DUO_LLAMA_SRC, or
the sdist scripts/build-llama-cpp.sh extracts), so it needs numpy (and PyYAML) only.
Output is F16 (default) or F32; check.sh quantizes with llama-quantize.
"""

from __future__ import annotations

import argparse
import os
import re
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

VERSION = "0.3.36"
VOCAB = "vendor/llama.cpp/models/ggml-vocab-llama-bpe.gguf"
GGUF_PY = "vendor/llama.cpp/gguf-py"


@dataclass(frozen=True)
class Shape:
    name: str
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_ctx: int = 8192
    rope_base: float = 500000.0
    note: str = ""


SHAPES = {
    s.name: s
    for s in (
        # Meta-Llama-3-8B's config.json
        Shape("llama3-8b", 4096, 32, 32, 8, 14336),
        # Llama-3.2-1B's config.json, with an output matrix of its own (the real one ties
        # it to the embeddings) and 8192 tokens of context (the real one: 131072)
        Shape("llama3.2-1b", 2048, 16, 32, 8, 8192),
        Shape("tiny", 64, 2, 4, 2, 128, n_ctx=2048),
    )
}
POOL = 16_777_259  # a prime: rows cut from a pool this long never repeat one another
WORD = re.compile(r"^\u0120?[A-Za-z]{2,}$")  # byte-level BPE: \u0120 is a leading space


def llama_src(arg: str | None) -> Path:
    here = Path(__file__).resolve().parents[2]
    candidates = [
        arg,
        os.environ.get("DUO_LLAMA_SRC"),
        here / ".gpu-work" / "src" / f"llama-cpp-python-{VERSION}",  # check.sh's
        Path(os.environ.get("DUO_HOME", Path.home() / ".cache/duo")) / f"llama.cpp/src-{VERSION}",
    ]
    for c in candidates:
        if c and (Path(c) / VOCAB).is_file():
            return Path(c)
    sys.exit(f"synth: no llama-cpp-python {VERSION} sources with {VOCAB} (pass --llama-src)")


def read_vocab(path: Path) -> dict[str, Any]:
    """The tokenizer's keys of a GGUF file (gguf-py's reader takes 15 s over this one)."""
    data = path.read_bytes()
    pos = 0

    def unpack(fmt: str) -> Any:
        nonlocal pos
        value = struct.unpack_from("<" + fmt, data, pos)[0]
        pos += struct.calcsize("<" + fmt)
        return value

    def string() -> str:
        nonlocal pos
        n = unpack("Q")
        pos += n
        return data[pos - n : pos].decode("utf-8")

    scalars = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q"}
    scalars[12] = "d"

    def value(kind: int) -> Any:
        if kind == 8:
            return string()
        if kind == 9:
            item, n = unpack("I"), unpack("Q")
            return [value(item) for _ in range(n)]
        return unpack(scalars[kind])

    if data[:4] != b"GGUF":
        sys.exit(f"synth: {path} is not a GGUF file")
    pos = 8
    _tensors, n_kv = unpack("Q"), unpack("Q")
    kv = {}
    for _ in range(n_kv):
        key = string()
        kv[key] = value(unpack("I"))
    return {
        "model": kv["tokenizer.ggml.model"],
        "pre": kv["tokenizer.ggml.pre"],
        "tokens": kv["tokenizer.ggml.tokens"],
        "types": kv["tokenizer.ggml.token_type"],
        "merges": kv["tokenizer.ggml.merges"],
        "bos": int(kv["tokenizer.ggml.bos_token_id"]),
        "eos": int(kv["tokenizer.ggml.eos_token_id"]),
    }


def word_map(tokens: list[str], types: list[int], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(words, next word): the plain-word tokens and a random cyclic order over them."""
    words = np.array(
        [i for i, (t, k) in enumerate(zip(tokens, types, strict=True)) if k == 1 and WORD.match(t)]
    )
    rng = np.random.default_rng(seed)
    order = rng.permutation(words)
    nxt = np.empty_like(order)
    nxt[:-1] = order[1:]
    nxt[-1] = order[0]  # one cycle through every word: no short loops
    return order, nxt


def disagree(order: np.ndarray, nxt: np.ndarray, agree: float, seed: int) -> np.ndarray:
    """The draft's next word: the main model's on a fraction `agree` of the words, and
    another word's (a shuffle among the rest) on the others; still a permutation."""
    if agree >= 1:
        return nxt
    rng = np.random.default_rng(seed + 1)
    moved = rng.choice(len(order), size=round((1 - agree) * len(order)), replace=False)
    out = nxt.copy()
    out[moved] = nxt[np.roll(moved, 1)]
    return out


class Pool:
    """Random values cut into tensors: a prime-length pool of standard normals read from a
    random offset (8 GB of independent normals would take minutes to draw)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.values = self.rng.standard_normal(POOL, dtype=np.float32)

    def take(self, shape: tuple[int, ...], std: float, dtype: Any = np.float32) -> np.ndarray:
        n = int(np.prod(shape))
        start = int(self.rng.integers(POOL))
        out = np.empty(n, dtype)
        done = 0
        while done < n:
            piece = min(n - done, POOL - start)
            chunk = self.values[start : start + piece]
            np.multiply(chunk, std, out=out[done : done + piece], casting="unsafe")
            done += piece
            start = 0
        return out.reshape(shape)


def tensors(shape: Shape, vocab: dict[str, Any], args: argparse.Namespace, dtype: Any) -> Any:
    """(name, array) in file order, made one at a time."""
    n_vocab = len(vocab["tokens"])
    e, hd = shape.n_embd, shape.n_embd // shape.n_head
    pool = Pool(args.seed)
    embd = pool.take((n_vocab, e), 1.0)
    order, nxt = word_map(vocab["tokens"], vocab["types"], args.map_seed)
    nxt = disagree(order, nxt, args.agree, args.map_seed)
    # logit of token j given a hidden state h ~ embd[t] (RMS 1 after the norm): its row
    # is embd[t] for the t the map sends to j, scaled so the winner's logit is ~20 and
    # the others' spread 20/sqrt(n_embd); tokens the map never reaches score 0
    output = np.zeros((n_vocab, e), np.float32)
    output[nxt] = embd[order] * (20.0 / e)
    yield "token_embd.weight", embd
    del embd
    yield "output_norm.weight", np.ones(e, np.float32)
    yield "output.weight", output
    del output
    std = 0.3 / np.sqrt(e)  # each layer adds ~0.1 to the residual's RMS of 1
    for i in range(shape.n_layer):
        b = f"blk.{i}."
        yield b + "attn_norm.weight", np.ones(e, np.float32)
        yield b + "attn_q.weight", pool.take((e, e), std, dtype)
        yield b + "attn_k.weight", pool.take((shape.n_head_kv * hd, e), std, dtype)
        yield b + "attn_v.weight", pool.take((shape.n_head_kv * hd, e), std, dtype)
        yield b + "attn_output.weight", pool.take((e, e), std, dtype)
        yield b + "ffn_norm.weight", np.ones(e, np.float32)
        yield b + "ffn_gate.weight", pool.take((shape.n_ff, e), std, dtype)
        yield b + "ffn_up.weight", pool.take((shape.n_ff, e), std, dtype)
        yield b + "ffn_down.weight", pool.take((e, shape.n_ff), std, dtype)


def tensor_shapes(shape: Shape, n_vocab: int) -> list[tuple[str, tuple[int, ...]]]:
    e, hd = shape.n_embd, shape.n_embd // shape.n_head
    out: list[tuple[str, tuple[int, ...]]] = [
        ("token_embd.weight", (n_vocab, e)),
        ("output_norm.weight", (e,)),
        ("output.weight", (n_vocab, e)),
    ]
    for i in range(shape.n_layer):
        b = f"blk.{i}."
        out += [
            (b + "attn_norm.weight", (e,)),
            (b + "attn_q.weight", (e, e)),
            (b + "attn_k.weight", (shape.n_head_kv * hd, e)),
            (b + "attn_v.weight", (shape.n_head_kv * hd, e)),
            (b + "attn_output.weight", (e, e)),
            (b + "ffn_norm.weight", (e,)),
            (b + "ffn_gate.weight", (shape.n_ff, e)),
            (b + "ffn_up.weight", (shape.n_ff, e)),
            (b + "ffn_down.weight", (e, shape.n_ff)),
        ]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", choices=sorted(SHAPES), required=True)
    p.add_argument("-o", "--output", required=True, type=Path)
    p.add_argument("--type", choices=("f16", "f32"), default="f16")
    p.add_argument("--seed", type=int, default=1, help="the weights' seed (default 1)")
    p.add_argument(
        "--map-seed", type=int, default=0, help="the word order's seed: share it in a pair"
    )
    p.add_argument(
        "--agree",
        type=float,
        default=1.0,
        help="fraction of words on which this model follows the shared order (a draft: "
        "about its acceptance rate; default 1)",
    )
    p.add_argument("--llama-src", help="llama-cpp-python's source tree (default: found)")
    args = p.parse_args(argv)
    if not 0 <= args.agree <= 1:
        p.error("--agree is a fraction, 0 to 1")
    src = llama_src(args.llama_src)
    sys.path.insert(0, str(src / GGUF_PY))
    import gguf

    t0 = time.monotonic()
    shape = SHAPES[args.shape]
    vocab = read_vocab(src / VOCAB)
    n_vocab = len(vocab["tokens"])
    dtype = np.float16 if args.type == "f16" else np.float32
    tmp = args.output.with_name(args.output.name + ".part")
    w = gguf.GGUFWriter(str(tmp), "llama")
    w.add_name(f"synthetic {shape.name} (random weights)")
    w.add_description(
        f"duo scripts/gpu/synth.py --shape {shape.name} --seed {args.seed} "
        f"--map-seed {args.map_seed} --agree {args.agree}"
    )
    w.add_file_type(
        gguf.LlamaFileType.MOSTLY_F16 if args.type == "f16" else gguf.LlamaFileType.ALL_F32
    )
    w.add_vocab_size(n_vocab)
    w.add_context_length(shape.n_ctx)
    w.add_embedding_length(shape.n_embd)
    w.add_block_count(shape.n_layer)
    w.add_feed_forward_length(shape.n_ff)
    w.add_head_count(shape.n_head)
    w.add_head_count_kv(shape.n_head_kv)
    w.add_rope_freq_base(shape.rope_base)
    w.add_rope_dimension_count(shape.n_embd // shape.n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model(vocab["model"])
    w.add_tokenizer_pre(vocab["pre"])
    w.add_token_list(vocab["tokens"])
    w.add_token_types(vocab["types"])
    w.add_token_merges(vocab["merges"])
    w.add_bos_token_id(vocab["bos"])
    w.add_eos_token_id(vocab["eos"])
    for name, dims in tensor_shapes(shape, n_vocab):
        # norms stay F32, as convert_hf_to_gguf writes them
        dt = np.dtype(np.float32 if len(dims) == 1 else dtype)
        w.add_tensor_info(name, dims, dt, int(np.prod(dims)) * dt.itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    total = 0
    for _name, array in tensors(shape, vocab, args, dtype):
        data = array if array.ndim == 1 else array.astype(dtype, copy=False)
        w.write_tensor_data(data)
        total += data.nbytes
    w.close()
    tmp.rename(args.output)
    print(
        f"synth: {args.output} ({shape.name}, {args.type}, {total / 1e9:.2f} GB of weights) "
        f"in {time.monotonic() - t0:.1f} s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
