"""A model's vocabulary and chat template: token IDs to text and back (llama.cpp's).

`Vocabulary` reads what a loaded GGUF says about its tokens: tokenizing, each token's
bytes, which tokens end a generation, a fingerprint that tells whether two models' token
IDs are interchangeable, and the Jinja chat template that turns messages into a prompt.
It shares the model's handle; `duo.llama.backend.Model` owns both.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from duo.errors import UsageError

if TYPE_CHECKING:
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

# llama.cpp's vocabulary types, and the token attributes that let a special token swallow
# the whitespace next to it (llama.h: enum llama_vocab_type, enum llama_token_attr).
_VOCAB_SPM, _VOCAB_BPE = 1, 2
_ATTR_STRIP = (1 << 7) | (1 << 8)  # LLAMA_TOKEN_ATTR_LSTRIP | LLAMA_TOKEN_ATTR_RSTRIP


@dataclass(frozen=True)
class FimTokens:
    """A vocabulary's fill-in-the-middle tokens (None: it has none of that kind), and the
    BOS token a prompt starts with (None: the model adds none)."""

    prefix: int | None
    suffix: int | None
    middle: int | None
    repo: int | None
    file_sep: int | None
    bos: int | None


class Vocabulary:
    """The tokens of a loaded llama model (`model`: its llama_model handle)."""

    def __init__(self, lib: Any, model: Any) -> None:
        self._lib = lib
        self._model = model
        self.handle = lib.llama_model_get_vocab(model)  # llama_vocab *
        self.n_vocab: int = lib.llama_vocab_n_tokens(self.handle)
        self.template: str | None = None  # a chat template in place of the GGUF's
        self._pieces: dict[int, bytes] = {}
        self._eog: dict[int, bool] = {}
        self._fingerprint: str | None = None

    def tokenize(
        self, text: str, *, add_special: bool = True, parse_special: bool = True
    ) -> list[int]:
        """With parse_special, special tokens written in the text ("<|im_end|>") are those
        tokens; without, they are plain text."""
        data = text.encode("utf-8")
        capacity = len(data) + 16
        buf = (ctypes.c_int32 * capacity)()
        args = (add_special, parse_special)
        n = self._lib.llama_tokenize(self.handle, data, len(data), buf, capacity, *args)
        if n < 0:
            capacity = -n
            buf = (ctypes.c_int32 * capacity)()
            n = self._lib.llama_tokenize(self.handle, data, len(data), buf, capacity, *args)
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        """The bytes a token stands for (special tokens render as nothing)."""
        cached = self._pieces.get(token)
        if cached is None:
            buf = ctypes.create_string_buffer(64)
            n = self._lib.llama_token_to_piece(self.handle, token, buf, 64, 0, False)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = self._lib.llama_token_to_piece(self.handle, token, buf, -n, 0, False)
            cached = self._pieces[token] = buf.raw[:n]
        return cached

    def special_piece(self, token: int) -> bytes:
        """The bytes a token stands for, a special token's own text included (as
        llama-server's /tokenize and /detokenize show them)."""
        buf = ctypes.create_string_buffer(256)
        n = self._lib.llama_token_to_piece(self.handle, token, buf, 256, 0, True)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = self._lib.llama_token_to_piece(self.handle, token, buf, -n, 0, True)
        return buf.raw[:n]

    def is_eog(self, token: int) -> bool:
        eog = self._eog.get(token)  # a dict probe, not a foreign call, per emitted token
        if eog is None:
            eog = self._eog[token] = bool(self._lib.llama_vocab_is_eog(self.handle, token))
        return eog

    def end_token(self) -> int:
        """The token that ends a text: EOT, else EOS (llama.cpp's infill sampler's)."""
        eot: int = self._lib.llama_vocab_eot(self.handle)
        return eot if eot >= 0 else int(self._lib.llama_vocab_eos(self.handle))

    def fim_tokens(self) -> FimTokens:
        """The fill-in-the-middle tokens the vocabulary has (None for each it lacks)."""
        lib, v = self._lib, self.handle

        def token(fn: str) -> int | None:
            t: int = getattr(lib, fn)(v)
            return t if t >= 0 else None  # LLAMA_TOKEN_NULL is -1

        return FimTokens(
            prefix=token("llama_vocab_fim_pre"),
            suffix=token("llama_vocab_fim_suf"),
            middle=token("llama_vocab_fim_mid"),
            repo=token("llama_vocab_fim_rep"),
            file_sep=token("llama_vocab_fim_sep"),
            bos=token("llama_vocab_bos") if lib.llama_vocab_get_add_bos(v) else None,
        )

    def token_text(self, token: int) -> str:
        raw: bytes = self._lib.llama_vocab_get_text(self.handle, token)
        return raw.decode("utf-8", "replace")

    def longest_token_bytes(self) -> int | None:
        """The most bytes of prompt text one token can stand for, or None if no such bound holds.

        A prompt of L UTF-8 bytes then has at least ceil(L / longest) tokens: it cannot fit the
        context when L > (n_ctx - 1) * longest, which the lead can tell without tokenizing.

        Why that is safe: llama.cpp's SPM and byte-level BPE tokenizers give every byte of the
        text to exactly one token; none is dropped or normalised away (SPM's leading space and
        its 3-byte "▁" for a space only lengthen the text). An ordinary token stands for its
        piece, a byte token for one byte, and a special token matched in the text
        (parse_special) for its vocabulary text: the longest piece or text over the whole
        vocabulary bounds them all (a byte-level BPE token's text is longer than its bytes,
        which only loosens the bound). The bound fails where a tokenizer drops text: WordPiece
        and Unigram normalise whitespace away, and a special token with the LSTRIP or RSTRIP
        attribute swallows the whitespace beside it (Phi-3's, for one). There: None.
        """
        lib, vocab = self._lib, self.handle
        if lib.llama_vocab_type(vocab) not in (_VOCAB_SPM, _VOCAB_BPE):
            return None
        longest = 1
        for token in range(self.n_vocab):
            if lib.llama_vocab_get_attr(vocab, token) & _ATTR_STRIP:
                return None
            text = lib.llama_vocab_get_text(vocab, token) or b""
            longest = max(longest, len(text), len(self.piece(token)))
        return int(longest)

    @property
    def fingerprint(self) -> str:
        """A hash of the vocabulary: equal fingerprints mean interchangeable token IDs."""
        if self._fingerprint is None:
            h = hashlib.sha256()
            h.update(f"{self._lib.llama_vocab_type(self.handle)}:{self.n_vocab}".encode())
            for token in range(self.n_vocab):
                h.update(self._lib.llama_vocab_get_text(self.handle, token) or b"")
                h.update(b"\0")
            self._fingerprint = h.hexdigest()[:16]
        return self._fingerprint

    def chat_template(self) -> str | None:
        """The Jinja chat template: `template` when set, else the GGUF's own."""
        if self.template is not None:
            return self.template
        raw = self._lib.llama_model_chat_template(self._model, None)
        return raw.decode("utf-8", "replace") if raw else None

    def special_tokens(self) -> tuple[str, str]:
        """The text of the BOS and EOS tokens (as chat templates see them)."""
        bos = self.token_text(self._lib.llama_vocab_bos(self.handle))
        eos = self.token_text(self._lib.llama_vocab_eos(self.handle))
        return bos, eos

    def render_chat(
        self, messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> str:
        """The prompt text for a chat, from the GGUF's own Jinja chat template; `tools` (in
        OpenAI's shape) go to the template as its `tools` variable."""
        template = self.chat_template()
        if template is None:
            # No template in the file: a plain transcript the model can continue.
            lines = [f"{m['role']}: {m['content']}" for m in messages]
            return "\n".join([*lines, "assistant:"])
        bos, eos = self.special_tokens()
        formatter = _formatter(template, eos, bos)
        prompt: str = formatter(messages=list(messages), tools=tools).prompt  # type: ignore[arg-type]
        return prompt


@functools.lru_cache(maxsize=8)
def _formatter(template: str, eos: str, bos: str) -> Jinja2ChatFormatter:
    """A template compiled once: compiling Qwen2.5's takes 5 ms, rendering it 0.05, and
    a lead renders every chat request's prompt (the formatter keeps no state between
    renders, so threads share it)."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    return Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos)


def check_chat_template(template: str) -> None:
    """Raise UsageError unless `template` is a Jinja chat template that renders a chat of
    one user message (as render_chat renders it), so that a broken one is refused when it
    is given, not blamed on every request's messages."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    try:
        formatter = Jinja2ChatFormatter(template=template, eos_token="</s>", bos_token="<s>")
        formatter(messages=[{"role": "user", "content": "Hello"}])
    except Exception as e:  # Jinja's syntax and runtime errors, the template's own raises
        raise UsageError(
            f"not a chat template that renders a user message ({type(e).__name__}: {str(e)[:200]})"
        ) from None
