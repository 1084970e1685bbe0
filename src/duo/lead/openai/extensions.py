"""llama-server's extension endpoints, in its request and response shapes.

    POST /tokenize        {content, add_special=false, parse_special=true, with_pieces=false}
                          -> {tokens: [id, ...]} or {tokens: [{id, piece}, ...]}; a piece is
                          text, or a list of byte values where it is not valid UTF-8 alone
    POST /detokenize      {tokens: [id, ...]} -> {content}
    POST /apply-template  a chat request -> {prompt}: the text the lead would generate from
    GET  /props           the model, its context, its chat template, the default generation
                          settings, and duo's speculation settings

As llama-server does, `content` may also be a list mixing text and token IDs, and pieces and
detokenized text show special tokens by their text ("<|im_end|>"). Tokenizing runs off the
event loop, after the size check every prompt gets. The requests come decoded
(duo.lead.openai.requests); what the endpoints need of the lead is `ExtensionLead`.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal, Protocol, cast

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from duo import __version__
from duo.lead.engine.lead import ModelInfo, Props
from duo.lead.openai.chat import ChatRequest
from duo.lead.openai.prompts import Prompts
from duo.lead.openai.requests import CompletionRequest, DetokenizeRequest, TokenizeRequest
from duo.lead.protocol.llama import AppliedTemplate, Detokenized, PropsBody, TokenPiece, Tokens
from duo.lead.routes import Answer, Operation


class ExtensionLead(Protocol):
    """What the extension endpoints need of the lead (duo.lead.engine.lead.Lead)."""

    @property
    def info(self) -> ModelInfo: ...

    def special_piece(self, token: int) -> bytes: ...

    def props(self) -> Props: ...


class Extensions:
    """The endpoints llama-server's users script against."""

    def __init__(self, lead: ExtensionLead, prompts: Prompts) -> None:
        self.lead = lead
        self.prompts = prompts

    def operations(self) -> list[Operation]:
        """Their part of the route table (duo.lead.routes)."""
        return [
            Operation(
                "POST",
                "/tokenize",
                "Tokenize text (llama-server)",
                self.tokenize,
                Answer(Tokens),
                body=TokenizeRequest,
            ),
            Operation(
                "POST",
                "/detokenize",
                "Token IDs back to text (llama-server)",
                self.detokenize,
                Answer(Detokenized),
                body=DetokenizeRequest,
            ),
            Operation(
                "POST",
                "/apply-template",
                "The prompt a chat request renders to (llama-server)",
                self.apply_template,
                Answer(AppliedTemplate),
                body=ChatRequest,
            ),
            Operation(
                "GET",
                "/props",
                "Model, context, chat template, defaults and speculation settings (llama-server)",
                self.props,
                Answer(PropsBody),
            ),
        ]

    async def tokenize(self, request: Request, body: TokenizeRequest) -> Response:
        content = body.content
        if content is None:  # llama-server answers an empty list
            return JSONResponse(Tokens(tokens=[]))
        tokens = await self.prompts.tokenize_parts(
            content if isinstance(content, list) else [content],
            add_special=bool(body.add_special),
            param="content",
            parse_special=bool(body.parse_special),
        )
        if not body.with_pieces:
            return JSONResponse(Tokens(tokens=[*tokens]))
        pieces = await asyncio.to_thread(self._pieces, tokens)
        shown = [TokenPiece(id=t, piece=p) for t, p in zip(tokens, pieces, strict=True)]
        return JSONResponse(Tokens(tokens=[*shown]))

    def _pieces(self, tokens: list[int]) -> list[str | list[int]]:
        out: list[str | list[int]] = []
        for token in tokens:
            piece = self.lead.special_piece(token)
            try:
                out.append(piece.decode("utf-8"))
            except UnicodeDecodeError:  # part of a character: its bytes, as llama-server
                out.append(list(piece))
        return out

    async def detokenize(self, request: Request, body: DetokenizeRequest) -> Response:
        ids = self.prompts.token_ids(body.tokens, "tokens")

        def text() -> str:
            pieces = b"".join(self.lead.special_piece(t) for t in ids)
            return pieces.decode("utf-8", "replace")

        return JSONResponse(Detokenized(content=await asyncio.to_thread(text)))

    async def apply_template(self, request: Request, body: ChatRequest) -> Response:
        prompt, _ = await self.prompts.chat(body)
        return JSONResponse(AppliedTemplate(prompt=prompt))

    async def props(self, request: Request) -> Response:
        info, props = self.lead.info, self.lead.props()
        spec = props.spec
        caps = await self.prompts.template_caps()
        body: PropsBody = {
            "default_generation_settings": {
                "n_ctx": info.n_ctx,
                "params": generation_defaults(spec.draft_max),
            },
            "total_slots": props.slots,
            "model_alias": info.name,
            "model_path": props.model_path,
            "modalities": {"vision": False, "audio": False},
            "chat_template": props.chat_template,
            "chat_template_caps": caps.as_json(),
            "bos_token": props.bos_token,
            "eos_token": props.eos_token,
            "build_info": f"duo {__version__}",
            "is_sleeping": False,
            "n_vocab": info.n_vocab,
            "speculative": {
                "mode": spec.mode,
                "spec_types": sorted(spec.spec_types),
                "draft_max": spec.draft_max,
                "max_ahead": spec.max_ahead,
                "policy": "adaptive" if spec.adaptive else "fixed",
                "deterministic": spec.deterministic,
                "ngram_max": spec.ngram_max,
                "lookup_max": spec.lookup_max,
                "local_drafter": props.local_drafter,
                "drafters": props.drafters,
            },
            "placement": {
                "way": cast(Literal["alone", "split", "fixed"], props.sharing.way),
                "threads": props.sharing.main_threads,
                "threads_draft": props.sharing.draft_threads,
                "expected_tokens_per_second": props.sharing.expected,
                "switches": props.sharing.switches,
            },
        }
        return JSONResponse(body)


def generation_defaults(draft_max: int) -> dict[str, Any]:
    """The request fields' defaults, under llama-server's names (`/props` params)."""
    d = CompletionRequest(prompt="")
    return {
        "n_predict": -1,  # /v1/completions: 16 tokens; chat: up to the context
        "seed": d.seed,  # random
        "temperature": d.temperature,
        "top_k": d.top_k,
        "top_p": d.top_p,
        "min_p": d.min_p,
        "repeat_penalty": d.repeat_penalty,
        "repeat_last_n": d.repeat_last_n,
        "presence_penalty": d.presence_penalty,
        "frequency_penalty": d.frequency_penalty,
        "logit_bias": [],
        "stop": [],
        "n_probs": 0,
        "stream": d.stream,
        "samplers": ["logit_bias", "penalties", "top_k", "top_p", "min_p", "temperature"],
        "speculative.n_max": draft_max,
        "speculative.n_min": 0,
    }
