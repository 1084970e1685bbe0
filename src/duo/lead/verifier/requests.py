"""The verifier API's requests (seed 003's fields, and duo's), typed and bounded (its
answers' shapes: duo.lead.protocol.verifier).

    PrefillRequest  POST /prefill  {prompt, session?, temperature?, seed?, top_k?, ...}
    VerifyRequest   POST /verify   {draft_tokens, session?}

Greedy unless the prefill asks for a temperature; with one, the lead samples losslessly
(duo.core.verifier), llama.cpp server's sampler defaults otherwise.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

from duo.core.sampling import SamplingParams
from duo.errors import DuoError, UsageError
from duo.lead.body import MAX_SEED, Fields, TokenId, filled

_D = SamplingParams()
MAX_DRAFT = 256  # draft tokens in one verification
SESSION_HEADER = "X-Duo-Session"  # the session, when the body does not name it

SESSION_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"  # the body's field and the header alike
SessionId = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=128,
        pattern=SESSION_PATTERN,
        description=f"the client's session (else the {SESSION_HEADER} header, else "
        "'default'): each session generates on its own",
    ),
]


class PrefillRequest(Fields, kw_only=True):
    prompt: Annotated[
        str | Annotated[list[TokenId], Meta(min_length=1)],
        Meta(description="text (tokenized with the model's BOS token), or token IDs"),
    ]
    session: SessionId | None = None
    temperature: Annotated[Annotated[float, Meta(ge=0)] | None, Meta(description="0: greedy")] = 0.0
    seed: Annotated[
        Annotated[int, Meta(ge=-1, extra_json_schema={"maximum": MAX_SEED})] | None,
        Meta(description="-1: random"),
    ] = -1
    top_k: Annotated[Annotated[int, Meta(ge=0)] | None, Meta(description="0: off")] = _D.top_k
    top_p: Annotated[Annotated[float, Meta(gt=0, le=1)] | None, Meta(description="1: off")] = (
        _D.top_p
    )
    min_p: Annotated[Annotated[float, Meta(ge=0, le=1)] | None, Meta(description="0: off")] = (
        _D.min_p
    )

    def sampling(self) -> SamplingParams:
        seed = filled(self.seed)
        if seed > MAX_SEED:
            raise UsageError(f"'seed' must be in [-1, {MAX_SEED}]", param="seed")
        params = SamplingParams(
            temperature=filled(self.temperature),
            top_k=filled(self.top_k),
            top_p=filled(self.top_p),
            min_p=filled(self.min_p),
            seed=None if seed == -1 else seed,
        )
        try:
            return params.check()
        except DuoError as e:
            raise UsageError(str(e)) from None


class VerifyRequest(Fields, kw_only=True):
    draft_tokens: Annotated[
        list[TokenId],
        Meta(
            max_length=MAX_DRAFT,
            description="the draft, after the tokens committed so far (its head: the main "
            "model's correction from the last answer, preds[accepted_prefix_len])",
        ),
    ] = msgspec.field(default_factory=list)
    session: SessionId | None = None
