"""One choice of a response, in OpenAI's shapes: whole, or as the pieces of a stream.

A `Reply` turns the text of choice `index` into the `choices[]` entries of a response: the
whole choice (`whole`), or stream pieces as the text arrives (`start`, `text`, `end`; each
returns the entries to send, one chunk each; the last entry of `end` carries the
finish_reason). `CompletionReply` shapes /v1/completions, `ChatReply` /v1/chat/completions,
with a reasoning model's thoughts apart from its answer (duo.lead.openai.reasoning) and
tool calls parsed out of the answer when the request offers tools. With `logprobs`
asked for, `shape` turns the logprob entries of the tokens that spelled a piece of text
into the entry's `logprobs` field.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from duo.core.logprobs import TokenLogprob
from duo.lead.openai.reasoning import Format, Thoughts, split
from duo.lead.protocol.openai import (
    AssistantMessage,
    CalledFunction,
    CalledTool,
    CalledToolDelta,
    ChatChoice,
    ChatDelta,
    ChunkChoice,
    CompletionChoice,
    FunctionDelta,
)
from duo.lead.tools.calls import CallPiece, ToolCallStream, Tools, parse_tool_calls
from duo.lead.tools.formats import ToolCall

Entry = CompletionChoice | ChatChoice | ChunkChoice  # an entry of a response's `choices`
Shape = Callable[[Sequence[TokenLogprob]], Any]  # logprob entries -> the `logprobs` field
NO_LOGPROBS: Sequence[TokenLogprob] = ()


class Reply(Protocol):
    def start(self) -> Sequence[Entry]: ...

    def text(
        self, text: str, logprobs: Sequence[TokenLogprob] = NO_LOGPROBS
    ) -> Sequence[Entry]: ...

    def end(self, finish: str) -> Sequence[Entry]: ...

    def whole(
        self, text: str, finish: str, logprobs: Sequence[TokenLogprob] = NO_LOGPROBS
    ) -> Entry: ...


class CompletionReply:
    def __init__(self, index: int, shape: Shape | None = None) -> None:
        self.index = index
        self.shape = shape

    def _entry(
        self, text: str, finish: str | None, logprobs: Sequence[TokenLogprob] = NO_LOGPROBS
    ) -> CompletionChoice:
        shaped = self.shape(logprobs) if self.shape else None
        return {"index": self.index, "text": text, "logprobs": shaped, "finish_reason": finish}

    def start(self) -> list[CompletionChoice]:
        return []

    def text(
        self, text: str, logprobs: Sequence[TokenLogprob] = NO_LOGPROBS
    ) -> list[CompletionChoice]:
        return [self._entry(text, None, logprobs)]

    def end(self, finish: str) -> list[CompletionChoice]:
        return [self._entry("", finish)]

    def whole(
        self, text: str, finish: str, logprobs: Sequence[TokenLogprob] = NO_LOGPROBS
    ) -> CompletionChoice:
        return self._entry(text, finish, logprobs)


class ChatReply:
    def __init__(
        self,
        index: int,
        tools: Tools | None = None,
        shape: Shape | None = None,
        reasoning: Format = "none",
        opened: bool = False,
    ) -> None:
        """`reasoning`: how thoughts are given (duo.lead.openai.reasoning); `opened`: the
        prompt opened them, so the reply starts inside."""
        self.index = index
        self.tools = tools
        self.shape = shape
        self.reasoning, self.opened = reasoning, opened
        self.thoughts = Thoughts(opened) if reasoning != "none" else None
        self.stream = ToolCallStream(tools.names) if tools is not None else None
        self._held: list[TokenLogprob] = []  # entries of text a tool call may hold back

    def _entry(self, delta: ChatDelta, finish: str | None = None) -> ChunkChoice:
        return {"index": self.index, "delta": delta, "logprobs": None, "finish_reason": finish}

    def _with_held(self, entry: ChunkChoice) -> ChunkChoice:
        if self.shape and self._held:
            entry["logprobs"] = self.shape(self._held)
        self._held = []
        return entry

    def _pieces(self, thoughts: str, answer: str, raw: str) -> list[ChunkChoice]:
        """The deltas of some thoughts and answer (`raw`: the text they came from)."""
        if self.reasoning == "deepseek-legacy":
            answer = raw
        out = [self._entry({"reasoning_content": thoughts})] if thoughts else []
        pieces: list[CallPiece] = []
        if self.stream is not None:
            answer, pieces = self.stream.feed(answer)
        if answer:
            out.append(self._entry({"content": answer}))
        if pieces:
            out.append(self._entry({"tool_calls": [_piece_delta(p) for p in pieces]}))
        return out

    def start(self) -> list[ChunkChoice]:
        return [self._entry({"role": "assistant", "content": ""})]

    def text(self, text: str, logprobs: Sequence[TokenLogprob] = NO_LOGPROBS) -> list[ChunkChoice]:
        self._held.extend(logprobs)
        thoughts, answer = self.thoughts.feed(text) if self.thoughts else ("", text)
        out = self._pieces(thoughts, answer, text)
        if out:
            out[0] = self._with_held(out[0])
        return out

    def end(self, finish: str) -> list[ChunkChoice]:
        thoughts, answer = self.thoughts.finish() if self.thoughts else ("", "")
        out = self._pieces(thoughts, answer, "")
        if self.stream is not None:
            rest, calls = self.stream.finish()
            if rest:
                out.append(self._entry({"content": rest}))
            streamed = len(self.stream.streamed)
            if calls[streamed:]:  # the calls not streamed yet, whole
                out.append(self._entry({"tool_calls": _call_deltas(calls, streamed)}))
            if calls:
                finish = "tool_calls"
        out.append(self._entry({}, finish))
        out[0] = self._with_held(out[0])
        return out

    def whole(
        self, text: str, finish: str, logprobs: Sequence[TokenLogprob] = NO_LOGPROBS
    ) -> ChatChoice:
        thoughts, answer = split(text, self.opened) if self.thoughts else (None, text)
        if self.reasoning == "deepseek-legacy":
            answer = text
        message: AssistantMessage = {"role": "assistant", "content": answer}
        if thoughts is not None:
            message["reasoning_content"] = thoughts
        if self.tools is not None:
            content, calls = parse_tool_calls(answer, self.tools.names)
            message["content"] = content
            if calls:
                message["tool_calls"] = [_called(c) for c in calls]
                finish = "tool_calls"
        shaped = self.shape(logprobs) if self.shape else None
        return {
            "index": self.index,
            "message": message,
            "logprobs": shaped,
            "finish_reason": finish,
        }


def _called(call: ToolCall) -> CalledTool:
    function: CalledFunction = {"name": call.name, "arguments": call.arguments}
    return {"id": call.id, "type": "function", "function": function}


def _call_deltas(calls: list[ToolCall], streamed: int = 0) -> list[CalledToolDelta]:
    """Whole calls, but the first `streamed`, as stream deltas, each with its position among
    the choice's calls."""
    return [
        {"index": k, "id": c.id, "type": "function", "function": _function(c.name, c.arguments)}
        for k, c in enumerate(calls)
        if k >= streamed
    ]


def _piece_delta(piece: CallPiece) -> CalledToolDelta:
    """A streaming call's piece as OpenAI streams it: the first with the call's ID, type and
    name, each with its arguments' next text."""
    if piece.id:
        function = _function(piece.name, piece.arguments)
        return {"index": piece.index, "id": piece.id, "type": "function", "function": function}
    return {"index": piece.index, "function": {"arguments": piece.arguments}}


def _function(name: str, arguments: str) -> FunctionDelta:
    return {"name": name, "arguments": arguments}
