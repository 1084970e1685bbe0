"""From a request to what the main model runs: prompt tokens and the grammar of the reply.

    Prompts.chat(request)       a chat's prompt text, through the model's own chat template
    Prompts.tokenize(text)      its tokens, after a size check that needs none
    Prompts.tokenize_parts(...) texts and token IDs, in order, as tokens
    Prompts.check_size(texts)   whether texts could fit the context, by their bytes
    Prompts.token_ids(ids)      token IDs a request gives, checked against the vocabulary
    Prompts.check_fits(tokens)  whether a prompt leaves room in the context
    Prompts.format_grammar(...) the grammar a response_format asks for
    Prompts.tool_grammar(...)   the grammar of a forced tool call
    Prompts.check_grammar(...)  a request's own grammar, parsed

Tokenizing, rendering the template and building a grammar run on worker threads: a long
prompt or a large schema does not hold up /health, the streams and the drafter channel.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

from duo.core.sampling import SamplingParams
from duo.errors import DuoError, PromptTooLong, UsageError
from duo.lead.engine.lead import ModelInfo
from duo.lead.openai.chat import ChatRequest
from duo.lead.openai.requests import ResponseFormat
from duo.lead.tools.calls import TemplateCaps, Tools, template_caps, template_messages
from duo.lead.tools.grammar import tool_call_gbnf

MAX_TEXTS = 4096  # texts in one request's list of texts and token IDs (/tokenize)


class PromptLead(Protocol):
    """What prompts need of the lead (duo.lead.engine.lead.Lead)."""

    @property
    def info(self) -> ModelInfo: ...

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]: ...

    def render_chat(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> str: ...

    def check_grammar(self, gbnf: str) -> None: ...

    def check_fits(self, prompt: list[int]) -> None: ...

    def longest_token_bytes(self) -> int | None: ...


class Prompts:
    def __init__(self, lead: PromptLead) -> None:
        self.lead = lead
        self.info = lead.info
        longest = lead.longest_token_bytes()
        # A prompt of more bytes than this cannot fit, whatever its tokens (see tokenize).
        self.max_prompt_bytes = None if longest is None else (self.info.n_ctx - 1) * longest
        self._caps: TemplateCaps | None = None

    # -- tokens -----------------------------------------------------------------------------

    async def tokenize(
        self, text: str, *, add_special: bool, param: str, parse_special: bool = True
    ) -> list[int]:
        """Tokenize on a worker thread, after a size check that needs no tokens."""
        return await self.tokenize_parts(
            [text], add_special=add_special, param=param, parse_special=parse_special
        )

    async def tokenize_parts(
        self,
        parts: Sequence[str | int],
        *,
        add_special: bool,
        param: str,
        parse_special: bool = True,
    ) -> list[int]:
        """Texts and token IDs, in order, as tokens (BOS before the first, if it is a text
        and add_special), in one trip to a worker thread: at most MAX_TEXTS texts, of no
        more bytes in all than a context can hold.

        Off the event loop, a long prompt does not hold up the rest; ctypes lets go of the
        GIL inside llama_tokenize. That may run while the engine thread decodes on the same
        model: llama_tokenize only reads the vocabulary (llama_vocab::impl::tokenize is
        const, its working state lives in a per-call session), which llama.cpp never
        changes after loading, and the context it decodes in is not touched.
        """
        texts = [part for part in parts if isinstance(part, str)]
        if len(texts) > MAX_TEXTS:
            raise UsageError(f"'{param}' may hold at most {MAX_TEXTS} texts", param=param)
        self.check_size(texts, param)
        self.token_ids([part for part in parts if not isinstance(part, str)], param)

        def tokens() -> list[int]:
            out: list[int] = []
            for i, part in enumerate(parts):
                if isinstance(part, str):
                    first = add_special and i == 0
                    out += self.lead.tokenize(part, add_special=first, parse_special=parse_special)
                else:
                    out.append(part)
            return out

        try:
            return await asyncio.to_thread(tokens)
        except UnicodeEncodeError:  # a lone surrogate the decoder did not see
            raise UsageError("the prompt is not valid text", param=param) from None

    def check_size(self, texts: Sequence[str], param: str) -> None:
        """Whether texts could fit the context at all, by their bytes (no token is more
        than the vocabulary's longest): a PromptTooLong naming `param` if they cannot."""
        size = sum(len(text.encode("utf-8", "surrogatepass")) for text in texts)
        if self.max_prompt_bytes is not None and size > self.max_prompt_bytes:
            raise PromptTooLong(
                f"the prompt is {size} bytes, more than any {self.info.n_ctx}-token "
                f"context can hold ({self.max_prompt_bytes} bytes)",
                param=param,
            )

    def token_ids(self, tokens: Sequence[int], param: str) -> list[int]:
        """Token IDs from a request (never negative: the request's type saw to it),
        each checked against the vocabulary."""
        n_vocab = self.info.n_vocab
        if any(t >= n_vocab for t in tokens):
            raise UsageError(f"'{param}' token IDs must be integers in [0, {n_vocab})", param=param)
        return list(tokens)

    def check_fits(self, tokens: list[int], param: str) -> None:
        try:
            self.lead.check_fits(tokens)
        except PromptTooLong as e:
            raise PromptTooLong(str(e), param=param) from None
        except DuoError as e:
            raise UsageError(str(e), param=param) from None

    # -- chat templates ---------------------------------------------------------------------

    async def chat(self, request: ChatRequest) -> tuple[str, Tools | None]:
        """The prompt text of a chat request (its messages and tools through the model's
        own chat template), and the tools the reply may call."""
        messages = request.template_messages()
        tools = request.offered_tools()
        caps = await self.template_caps()
        name = self.info.name
        if tools is not None and not caps.supports_tools:
            raise UsageError(
                f"the chat template of {name} cannot show tools to the model, so it could "
                "not call them; give the lead a template that does (--chat-template-file)",
                param="tools",
            )
        if any("tool_calls" in m for m in messages) and not caps.supports_tool_calls:
            raise UsageError(
                f"the chat template of {name} cannot show earlier tool calls", param="messages"
            )
        messages = template_messages(messages, caps.object_arguments)
        shown = tools.shown() if tools is not None else None
        try:  # Jinja, pure Python: off the event loop too (it yields the GIL as it goes)
            text = await asyncio.to_thread(self.lead.render_chat, messages, shown)
        except Exception as e:  # templates raise on what they refuse (roles out of order, ...)
            raise UsageError(
                f"the model's chat template refused the messages: {str(e)[:300]}",
                param="messages",
            ) from None
        return text, tools

    async def template_caps(self) -> TemplateCaps:
        """What the main model's chat template can express, probed on first use."""
        if self._caps is None:
            self._caps = await asyncio.to_thread(template_caps, self.lead.render_chat)
        return self._caps

    # -- grammars ---------------------------------------------------------------------------

    async def format_grammar(
        self, sampling: SamplingParams, fmt: ResponseFormat | None
    ) -> SamplingParams:
        """`sampling` with the grammar of the response_format, if it asks for one.

        Built, and parsed by llama.cpp, on worker threads: a large schema does not hold up
        the other requests."""
        gbnf = None if fmt is None else await self._checked(fmt.gbnf, "response_format")
        return sampling if gbnf is None else replace(sampling, grammar=gbnf)

    async def tool_grammar(self, sampling: SamplingParams, tools: Tools) -> SamplingParams:
        """`sampling` with the grammar that holds the reply to a call to the tools
        (tool_choice "required" or a named function; one or more with parallel_tool_calls)."""
        if sampling.grammar is not None:
            raise UsageError(
                "'response_format' cannot be combined with tool_choice 'required' or a "
                "named function: the reply is a tool call",
                param="response_format",
            )
        tags = (await self.template_caps()).tool_call_tags
        gbnf = await self._checked(
            lambda: tool_call_gbnf(tools.shown(), tags, several=tools.parallel), "tools"
        )
        return replace(sampling, grammar=gbnf)

    async def check_grammar(self, gbnf: str, param: str) -> None:
        """A request's own GBNF, parsed by llama.cpp on a worker thread; its faults name
        `param`."""
        await self._checked(lambda: gbnf, param)

    async def _checked(self, build: Callable[[], str | None], param: str) -> str | None:
        """A grammar built and parsed on a worker thread; its faults name `param`."""
        try:
            gbnf: str | None = await asyncio.to_thread(build)
            if gbnf is not None:
                await asyncio.to_thread(self.lead.check_grammar, gbnf)
        except UsageError as e:
            raise UsageError(str(e), param=param) from None
        return gbnf
