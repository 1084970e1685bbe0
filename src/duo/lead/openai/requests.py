"""The lead's requests as typed models: each field's type, default, bounds and meaning in one
place.

    Sampling            what chat and text completions share: length, stops, sampler, answer
    CompletionRequest   POST /v1/completions
    ChatRequest         POST /v1/chat/completions and /apply-template (duo.lead.openai.chat)
    TokenizeRequest     POST /tokenize
    DetokenizeRequest   POST /detokenize

duo.lead.body decodes a body straight into one of these. Field names are OpenAI's,
with llama.cpp server's sampler fields (top_k, min_p, repeat_penalty, repeat_last_n) and
defaults (duo.core.sampling.SamplingParams, which these defaults are). What depends on the
model is checked when the request is served (duo.lead.openai.prompts): token IDs against
the vocabulary, the prompt against the context. The OpenAPI document's schemas are generated
from these classes (duo.lead.openapi); a test holds its defaults and bounds to the
lead's behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal, cast

import msgspec
from msgspec import Meta

from duo.core.logprobs import MAX_TOP_LOGPROBS
from duo.core.sampling import SamplingParams
from duo.errors import DuoError, UsageError
from duo.lead.body import MAX_SEED, Fields, TokenId, filled
from duo.lead.schema_refs import resolve_refs
from duo.llama.grammar import JSON_OBJECT, json_schema_gbnf

_D = SamplingParams()  # the defaults, llama.cpp server's
MAX_CHOICES = 128  # OpenAI's bound on `n`
MAX_STOPS = 4
MAX_STOP_CHARS = 1024  # the longest stop string (holding text back costs its length squared)

Stop = Annotated[str, Meta(max_length=MAX_STOP_CHARS)]
Json = dict[str, Any]


@dataclass(frozen=True)
class Output:
    """How a request wants its answer: how many choices, streamed or not."""

    n: int = 1  # choices
    stream: bool = False
    include_usage: bool = False  # stream_options.include_usage: a last chunk with usage


class StreamOptions(Fields, kw_only=True):
    include_usage: Annotated[
        bool | None,
        Meta(description="end the stream with a chunk of its own holding usage and timings"),
    ] = False


class JsonSchema(Fields, kw_only=True):
    name: str | None = None
    description: str | None = None
    schema: Annotated[Json | None, Meta(description="the JSON schema the reply follows")] = None
    strict: bool | None = None


class ResponseFormat(Fields, kw_only=True):
    """Text, or JSON held to a schema by a grammar (llama.cpp's JSON schema converter)."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: Annotated[JsonSchema | None, Meta(description="with type json_schema")] = None
    schema: Annotated[
        Json | None, Meta(description="llama-server's form: a json_object held to this schema")
    ] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.type == "json_schema" and self.json_schema is None:
            raise UsageError(
                "'response_format.json_schema' must be an object", param="response_format"
            )

    def gbnf(self) -> str | None:
        """The grammar the reply follows: None for text, llama.cpp's JSON grammar for
        json_object, the schema's grammar for a schema (slow for a large one: call it off
        the event loop)."""
        if self.type == "text":
            return None
        if self.type == "json_object":
            return (
                JSON_OBJECT if self.schema is None else json_schema_gbnf(resolve_refs(self.schema))
            )
        schema = self.json_schema.schema if self.json_schema is not None else None
        return json_schema_gbnf({} if schema is None else resolve_refs(schema))


class Sampling(Fields, kw_only=True):
    """The fields chat and text completions share: how long, when to stop, how to sample
    (llama.cpp's sampler chain), and how to answer."""

    model: Annotated[str | None, Meta(description="ignored: the lead serves one model")] = None
    max_tokens: Annotated[
        Annotated[int, Meta(ge=1)] | None,
        Meta(description="the most tokens to generate (cut to the context)"),
    ] = None
    max_completion_tokens: Annotated[
        Annotated[int, Meta(ge=1)] | None, Meta(description="max_tokens, under its new name")
    ] = None
    stop: Annotated[
        Annotated[list[Stop], Meta(max_length=MAX_STOPS)] | Stop | None,
        Meta(description="generation stops before any of these strings"),
    ] = None
    seed: Annotated[
        Annotated[int, Meta(ge=-1, extra_json_schema={"maximum": MAX_SEED})] | None,
        Meta(description="-1: random; with n, choice i samples with seed + i"),
    ] = -1
    temperature: Annotated[Annotated[float, Meta(ge=0)] | None, Meta(description="0: greedy")] = (
        _D.temperature
    )
    top_k: Annotated[Annotated[int, Meta(ge=0)] | None, Meta(description="0: off")] = _D.top_k
    top_p: Annotated[Annotated[float, Meta(gt=0, le=1)] | None, Meta(description="1: off")] = (
        _D.top_p
    )
    min_p: Annotated[Annotated[float, Meta(ge=0, le=1)] | None, Meta(description="0: off")] = (
        _D.min_p
    )
    # Past these bounds the penalised float32 logits overflow to inf: NaN probabilities.
    repeat_penalty: Annotated[
        Annotated[float, Meta(ge=1e-6, le=1e6)] | None, Meta(description="1: off")
    ] = _D.repeat_penalty
    repeat_last_n: Annotated[
        Annotated[int, Meta(ge=-1)] | None,
        Meta(description="tokens of history the penalties look at; -1: the whole context"),
    ] = _D.repeat_last_n
    # OpenAI's range; llama.cpp subtracts them from the logits as they are.
    presence_penalty: Annotated[
        Annotated[float, Meta(ge=-2, le=2)] | None,
        Meta(description="subtracted once from the logit of a token in that history"),
    ] = _D.presence_penalty
    frequency_penalty: Annotated[
        Annotated[float, Meta(ge=-2, le=2)] | None,
        Meta(description="subtracted from a token's logit once per time it occurs there"),
    ] = _D.frequency_penalty
    logit_bias: Annotated[
        Annotated[
            dict[TokenId, Annotated[float, Meta(ge=-100, le=100)]],
            Meta(extra_json_schema={"propertyNames": {"pattern": "^[0-9]+$"}}),
        ]
        | None,
        Meta(description="token ID (as a string) -> bias added to its logit"),
    ] = None
    n: Annotated[
        Annotated[int, Meta(ge=1, le=MAX_CHOICES)] | None,
        Meta(description="choices; with a seed s, choice i samples with seed s + i"),
    ] = 1
    stream: Annotated[
        bool | None, Meta(description="answer as server-sent events, ending in [DONE]")
    ] = False
    stream_options: StreamOptions | None = None
    user: Annotated[str | None, Meta(description="accepted, and unused")] = None
    response_format: ResponseFormat | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if filled(self.seed) > MAX_SEED:
            raise UsageError(f"'seed' must be in [-1, {MAX_SEED}]", param="seed")
        if self.stream_options is not None and not self.stream:
            raise UsageError("'stream_options' needs 'stream': true", param="stream_options")

    def output(self) -> Output:
        usage = self.stream_options is not None and filled(self.stream_options.include_usage)
        return Output(filled(self.n), filled(self.stream), usage)

    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or ())

    def max_new_tokens(self, n_ctx: int) -> int:
        """At most the context: nothing longer can be generated."""
        wanted = self.max_completion_tokens or self.max_tokens
        return n_ctx if wanted is None else min(wanted, n_ctx)

    def sampling(self, n_ctx: int, n_vocab: int) -> SamplingParams:
        """The sampler settings (without the response_format's grammar, which may take
        longer to build: see ResponseFormat.gbnf)."""
        repeat_last_n, seed = filled(self.repeat_last_n), filled(self.seed)
        bias = self.logit_bias or {}
        if any(token >= n_vocab for token in bias):
            raise UsageError(
                f"'logit_bias' keys must be token IDs in [0, {n_vocab})", param="logit_bias"
            )
        params = SamplingParams(
            temperature=filled(self.temperature),
            top_k=filled(self.top_k),
            top_p=filled(self.top_p),
            min_p=filled(self.min_p),
            repeat_penalty=filled(self.repeat_penalty),
            # llama.cpp's conventions: repeat_last_n -1 = the whole context, seed -1 = random.
            repeat_last_n=n_ctx if repeat_last_n == -1 else repeat_last_n,
            frequency_penalty=filled(self.frequency_penalty),
            presence_penalty=filled(self.presence_penalty),
            logit_bias=tuple(sorted(bias.items())),
            seed=None if seed == -1 else seed,
            logprobs=self.logprobs_wanted(),
        )
        try:
            params.check()
        except DuoError as e:  # the fields' bounds should have said it first
            raise UsageError(str(e)) from None
        return params

    def logprobs_wanted(self) -> int | None:
        """How many alternatives each token's logprobs list; None: no logprobs."""
        return None


class CompletionRequest(Sampling, kw_only=True):
    prompt: Annotated[
        str | list[str | TokenId],
        Meta(description="text (or a list holding one text), or the prompt's token IDs"),
    ]
    max_tokens: Annotated[
        Annotated[int, Meta(ge=1)] | None,
        Meta(description="the most tokens to generate (cut to the context)"),
    ] = 16
    logprobs: Annotated[
        Annotated[int, Meta(ge=0, le=MAX_TOP_LOGPROBS)] | None,
        Meta(description="the logprobs of each token and of this many alternatives"),
    ] = None
    echo: Annotated[
        bool | None, Meta(description="not supported: true is refused (the reply: the completion)")
    ] = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.echo:
            raise UsageError(
                "'echo' is not supported: the reply holds the completion only", param="echo"
            )
        prompt = self.prompt
        if isinstance(prompt, list) and sum(isinstance(t, str) for t in prompt) > 1:
            raise UsageError(
                "'prompt' holds several texts: a batch of prompts is not supported; send one "
                "request per prompt ('n' asks for several completions of one)",
                param="prompt",
            )
        if isinstance(prompt, list) and not (
            (len(prompt) == 1 and isinstance(prompt[0], str))
            or (prompt and all(isinstance(t, int) for t in prompt))
        ):
            raise UsageError(
                "'prompt' must be a non-empty string or a list of token IDs", param="prompt"
            )

    def text_or_tokens(self) -> str | list[int]:
        """The prompt: its text, or its token IDs (not yet checked against the vocabulary)."""
        prompt = self.prompt
        if isinstance(prompt, str):
            return prompt
        if isinstance(prompt[0], str):
            return prompt[0]
        return cast(list[int], prompt)  # __post_init__: all of them

    def logprobs_wanted(self) -> int | None:
        return self.logprobs


class TokenizeRequest(Fields, kw_only=True):
    content: Annotated[
        str | list[str | TokenId] | None,
        Meta(description="text, or a list of texts and token IDs (tokenized in order)"),
    ] = None
    add_special: Annotated[
        bool | None, Meta(description="add the model's BOS token (as to a prompt)")
    ] = False
    parse_special: Annotated[
        bool | None, Meta(description='read special tokens\' text ("<|im_end|>") as them')
    ] = True
    with_pieces: Annotated[
        bool | None, Meta(description="answer each token with its piece of text")
    ] = False


class DetokenizeRequest(Fields, kw_only=True):
    tokens: list[TokenId] = msgspec.field(default_factory=list)
