"""llama-server's extension endpoints, in its request and response shapes.

    POST /tokenize        {content, add_special=false, parse_special=true, with_pieces=false}
                          -> {tokens: [id, ...]} or {tokens: [{id, piece}, ...]}; a piece is
                          text, or a list of byte values where it is not valid UTF-8 alone
    POST /detokenize      {tokens: [id, ...]} -> {content}
    POST /apply-template  a chat request's {messages, tools, tool_choice} -> {prompt}: the
                          text the lead would generate from
    GET  /props           the model, its context, its chat template, the default generation
                          settings, and duo's speculation settings

As llama-server does, `content` may also be a list mixing text and token IDs, and pieces and
detokenized text show special tokens by their text ("<|im_end|>"). Tokenizing runs off the
event loop, after the size check every prompt gets.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from duo import __version__
from duo.core.sampling import SamplingParams
from duo.errors import UsageError
from duo.lead.openai.format import checked_text, field, read_body

if TYPE_CHECKING:
    from duo.lead.openai.api import Api

Endpoint = Callable[[Request], Awaitable[Response]]


class Extensions:
    """The endpoints llama-server's users script against, served by the lead's Api."""

    def __init__(self, api: Api) -> None:
        self.api = api

    def endpoints(self) -> list[tuple[str, str, Endpoint]]:
        """(method, path, endpoint) of each extension route."""
        return [
            ("POST", "/tokenize", self.tokenize),
            ("POST", "/detokenize", self.detokenize),
            ("POST", "/apply-template", self.apply_template),
            ("GET", "/props", self.props),
        ]

    async def _body(self, request: Request) -> dict[str, Any]:
        self.api.authorize_request(request)
        return await read_body(request, self.api.max_body)

    async def tokenize(self, request: Request) -> Response:
        body = await self._body(request)
        add_special = field(body, "add_special", bool, False)
        parse_special = field(body, "parse_special", bool, True)
        with_pieces = field(body, "with_pieces", bool, False)
        content = body.get("content")
        if content is None:  # llama-server answers an empty list
            return JSONResponse({"tokens": []})
        parts = content if isinstance(content, list) else [content]
        tokens: list[int] = []
        for i, part in enumerate(parts):
            if isinstance(part, str):
                tokens += await self.api.tokenize(
                    checked_text(part, "content"),
                    add_special=add_special and i == 0,
                    param="content",
                    parse_special=parse_special,
                )
            elif isinstance(part, int) and not isinstance(part, bool):
                tokens += self._checked_ids([part], "content")
            else:
                raise UsageError(
                    "'content' must be text, or a list of texts and token IDs", param="content"
                )
        if not with_pieces:
            return JSONResponse({"tokens": tokens})
        pieces = await asyncio.to_thread(self._pieces, tokens)
        return JSONResponse(
            {"tokens": [{"id": t, "piece": p} for t, p in zip(tokens, pieces, strict=True)]}
        )

    def _pieces(self, tokens: list[int]) -> list[str | list[int]]:
        model = self.api.lead.session.main
        out: list[str | list[int]] = []
        for token in tokens:
            piece = model.vocab.special_piece(token)
            try:
                out.append(piece.decode("utf-8"))
            except UnicodeDecodeError:  # part of a character: its bytes, as llama-server
                out.append(list(piece))
        return out

    async def detokenize(self, request: Request) -> Response:
        body = await self._body(request)
        tokens = body.get("tokens", [])
        if not isinstance(tokens, list):
            raise UsageError("'tokens' must be a list of token IDs", param="tokens")
        ids = self._checked_ids(tokens, "tokens")
        model = self.api.lead.session.main

        def text() -> str:
            return b"".join(model.vocab.special_piece(t) for t in ids).decode("utf-8", "replace")

        return JSONResponse({"content": await asyncio.to_thread(text)})

    def _checked_ids(self, tokens: list[Any], param: str) -> list[int]:
        n_vocab = self.api.info.n_vocab
        if not all(
            isinstance(t, int) and not isinstance(t, bool) and 0 <= t < n_vocab for t in tokens
        ):
            raise UsageError(f"'{param}' token IDs must be integers in [0, {n_vocab})", param=param)
        return list(tokens)

    async def apply_template(self, request: Request) -> Response:
        body = await self._body(request)
        prompt, _ = await self.api.chat_prompt(body)
        return JSONResponse({"prompt": prompt})

    async def props(self, request: Request) -> Response:
        self.api.authorize_request(request)
        lead = self.api.lead
        main = lead.session.main
        spec = lead.session.spec
        bos, eos = main.vocab.special_tokens()
        caps = await self.api.template_caps()
        return JSONResponse(
            {
                "default_generation_settings": {
                    "n_ctx": main.n_ctx,
                    "params": generation_defaults(spec.draft_max),
                },
                "total_slots": lead.engine.slots,
                "model_alias": lead.info.name,
                "model_path": str(main.path),
                "modalities": {"vision": False, "audio": False},
                "chat_template": main.vocab.chat_template() or "",
                "chat_template_caps": caps.as_json(),
                "bos_token": bos,
                "eos_token": eos,
                "build_info": f"duo {__version__}",
                "is_sleeping": False,
                "n_vocab": main.n_vocab,
                "speculative": {
                    "mode": spec.mode,
                    "spec_types": sorted(spec.spec_types),
                    "draft_max": spec.draft_max,
                    "max_ahead": spec.max_ahead,
                    "policy": "adaptive" if spec.adaptive else "fixed",
                    "deterministic": spec.deterministic,
                    "ngram_max": spec.ngram_max,
                    "local_drafter": lead.session.local is not None,
                    "drafters": lead.backs.connected,
                },
            }
        )


def generation_defaults(draft_max: int) -> dict[str, Any]:
    """The request fields' defaults, under llama-server's names (`/props` params)."""
    d = dataclasses.asdict(SamplingParams())
    return {
        "n_predict": -1,  # /v1/completions: 16 tokens; chat: up to the context
        "seed": -1,  # random
        "temperature": d["temperature"],
        "top_k": d["top_k"],
        "top_p": d["top_p"],
        "min_p": d["min_p"],
        "repeat_penalty": d["repeat_penalty"],
        "repeat_last_n": d["repeat_last_n"],
        "presence_penalty": d["presence_penalty"],
        "frequency_penalty": d["frequency_penalty"],
        "logit_bias": [],
        "stop": [],
        "n_probs": 0,
        "stream": False,
        "samplers": ["logit_bias", "penalties", "top_k", "top_p", "min_p", "temperature"],
        "speculative.n_max": draft_max,
        "speculative.n_min": 0,
    }
