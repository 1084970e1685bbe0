"""llama.cpp's native endpoints, as llama-server serves them (its clients: llama.vim and
llama.vscode on /infill, Continue's llama.cpp provider and scripts on /completion).

    POST /completion, /completions   a completion of each prompt (n_cmpl of each)
    POST /infill                      fill in the middle (duo.lead.native.infill)

A request becomes one job per prompt and completion (duo.lead.engine), each with the
request's sampler chain, an editor's limits (duo.core.limits), the slot it asks for and
whether it keeps the slot's cache. Whole, the answer is one object, or an array in index
order where there are several; streamed, server-sent events of each one's pieces, tagged
by index, each completion ending with its whole answer (stop: true, its text already
sent); no [DONE].
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from duo.core.limits import Limits
from duo.errors import NotSupported
from duo.lead.engine.events import Delta, Done, Job
from duo.lead.engine.lead import Lead
from duo.lead.format import event_stream
from duo.lead.native import answers
from duo.lead.native.infill import FIM_BATCH, FileChunk, infill_prompt, missing_tokens
from duo.lead.native.requests import CompletionBody, InfillBody, NativeSampling, SubPrompt
from duo.lead.openai.choices import choice_seed, merged_events
from duo.lead.openai.delivery import collect
from duo.lead.openai.prompts import Prompts
from duo.lead.protocol.llama import NativeChunk, NativeResult
from duo.lead.routes import Answer, Operation
from duo.sse import encode

ANSWERED = (
    "the whole answer (an array for several prompts or n_cmpl), or with `stream` "
    "server-sent events ending in each completion's answer, stop: true (no [DONE])"
)


@dataclass(frozen=True)
class Run:
    """A request made ready: its jobs, each job's prompt as text, what every answer says,
    and how to answer."""

    jobs: list[Job]
    prompt_texts: list[str]  # by job (a prompt's n_cmpl jobs share one text)
    request: answers.RequestFacts
    stream: bool
    fields: list[str] | None  # response_fields


class Native:
    def __init__(self, lead: Lead, prompts: Prompts, spm_infill: bool = False) -> None:
        self.lead = lead
        self.info = lead.info
        self.prompts = prompts
        self.spm_infill = spm_infill

    def operations(self) -> list[Operation]:
        """Their part of the route table (duo.lead.routes)."""
        answer = Answer(NativeResult, ANSWERED, chunk=NativeChunk)
        completion = "A completion in llama.cpp's native shape (llama-server's /completion)"
        return [
            Operation("POST", "/completion", completion, self.completion, answer, CompletionBody),
            Operation("POST", "/completions", completion, self.completion, answer, CompletionBody),
            Operation(
                "POST",
                "/infill",
                "Fill in the middle, as llama.vim and llama.vscode ask (llama-server's /infill)",
                self.infill,
                answer,
                InfillBody,
                errors=("400", "401", "413", "500", "501", "503"),
            ),
        ]

    async def completion(self, request: Request, body: CompletionBody) -> Response:
        prompts = [await self._tokens(p, add_special=True, param="prompt") for p in body.prompts()]
        for tokens in prompts:
            self.prompts.check_fits(tokens, "prompt")
        return await self._answer(request, await self._run(body, prompts, cut=False))

    async def infill(self, request: Request, body: InfillBody) -> Response:
        fim = self.lead.fim_tokens()
        missing = missing_tokens(fim)
        if missing:
            raise NotSupported(f"Infill is not supported by this model: {missing}")
        prefix = await self._tokens(body.input_prefix, add_special=False, param="input_prefix")
        suffix = await self._tokens(body.input_suffix, add_special=False, param="input_suffix")
        prompt = await self.prompts.tokenize(body.prompt or "", add_special=False, param="prompt")
        chunks = [FileChunk(c.text, c.filename or "tmp") for c in body.input_extra or ()]
        budget = body.max_new_tokens(self.info.n_ctx)  # the context: none was given

        def layout() -> tuple[list[int], bool]:
            return infill_prompt(
                fim,
                lambda text: self.lead.tokenize(text, add_special=False, parse_special=False),
                prefix,
                suffix,
                chunks,
                prompt,
                n_batch=max(self.info.n_batch, FIM_BATCH),
                n_ctx=self.info.n_ctx,
                n_predict=budget if budget < self.info.n_ctx else 0,
                spm=self.spm_infill,
            )

        tokens, cut = await asyncio.to_thread(layout)
        self.prompts.check_fits(tokens, "input_extra")
        return await self._answer(request, await self._run(body, [tokens], cut=cut))

    async def _tokens(self, prompt: SubPrompt, *, add_special: bool, param: str) -> list[int]:
        """A text, or texts and token IDs in order (BOS before a first text, with
        add_special), as tokens; special tokens' text is read as them in a prompt, and as
        text in an editor's prefix and suffix (as llama-server reads each)."""
        parts: Sequence[str | int] = [prompt] if isinstance(prompt, str) else prompt
        parse_special = param == "prompt"
        return await self.prompts.tokenize_parts(
            parts, add_special=add_special, param=param, parse_special=parse_special
        )

    async def _run(self, body: NativeSampling, prompts: list[list[int]], *, cut: bool) -> Run:
        """One job per prompt and completion, completion k of a prompt seeded seed + k."""
        n_ctx = self.info.n_ctx
        sampling = body.sampling(n_ctx, self.info.n_vocab)
        if sampling.grammar is not None:
            await self.prompts.check_grammar(sampling.grammar, "grammar")
        n_predict = body.max_new_tokens(n_ctx)
        stops = body.stops()
        n = body.completions()
        jobs = [
            Job(
                list(tokens),
                n_predict,
                stops,
                dataclasses.replace(sampling, seed=choice_seed(sampling.seed, k)),
                limits=Limits(body.n_indent or 0, max(0.0, body.t_max_predict_ms or 0)),
                slot=body.id_slot if body.id_slot is not None and body.id_slot >= 0 else None,
                cache_prompt=bool(body.cache_prompt),
            )
            for tokens in prompts
            for k in range(n)
        ]
        extra = {"n_indent": body.n_indent, "t_max_predict_ms": body.t_max_predict_ms}
        settings = answers.settings(sampling, n_predict, stops, bool(body.stream), extra)
        request = answers.RequestFacts(self.info.name, settings, n_ctx, cut)
        texts = [self._text(tokens) for tokens in prompts]
        by_job = [text for text in texts for _ in range(n)]
        return Run(jobs, by_job, request, bool(body.stream), body.response_fields)

    async def _answer(self, request: Request, run: Run) -> Response:
        if run.stream:
            return event_stream(self._events(run))
        collected = await collect(self.lead, run.jobs, request)
        if collected is None:
            return Response(status_code=499)  # nobody is there to read it
        out = []
        for i, (job, c) in enumerate(zip(run.jobs, collected, strict=True)):
            probs = answers.probabilities(c.entries, self.lead.piece) if c.entries else None
            whole = answers.result(
                run.request, i, job.prompt, run.prompt_texts[i], c.done, c.text, c.ids, probs
            )
            out.append(whole if run.fields is None else answers.selected(whole, run.fields))
        return JSONResponse(out[0] if len(out) == 1 else out)

    async def _events(self, run: Run) -> AsyncIterator[bytes]:
        predicted = [0] * len(run.jobs)
        async with aclosing(merged_events(self.lead, run.jobs)) as events:
            async for index, event in events:
                prompt = run.jobs[index].prompt
                if isinstance(event, Delta):
                    predicted[index] += len(event.ids)
                    if not event.text and not event.ids and not event.logprobs:
                        continue
                    probs = answers.probabilities(event.logprobs, self.lead.piece)
                    yield encode(
                        answers.chunk(
                            index, event.text, event.ids, predicted[index], len(prompt), probs
                        )
                    )
                elif isinstance(event, Done):
                    text = run.prompt_texts[index]
                    yield encode(answers.result(run.request, index, prompt, text, event))
                else:
                    yield encode(
                        {"error": {"code": 500, "message": event.message, "type": "server_error"}}
                    )
                    return

    def _text(self, prompt: Sequence[int]) -> str:
        """The prompt as llama-server shows it: special tokens by their text."""
        return b"".join(map(self.lead.special_piece, prompt)).decode("utf-8", "replace")
