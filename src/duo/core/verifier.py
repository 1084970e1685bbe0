"""Drafter-driven verification: a client drafts, the lead checks (seed 003's protocol).

The client owns the loop. It sends the prompt once (`/prefill`), then drafts of token IDs
(`/verify`); for each draft the lead answers how long a prefix the main model accepts and
its own token at each draft position plus one (`preds`). The lead commits the accepted
prefix only; the client puts the main model's correction, `preds[accepted]`, at the head of
its next draft.

It stays lossless with sampling: the token drawn at the first position the lead did not
commit is kept (`pending`) and is that position's token in the next verification, so each
committed token costs one draw, as in plain decoding (duo.core.verify), and a seeded
session commits what the main model alone would generate. Past the first disagreement,
`preds` holds the main model's most likely tokens given the draft (no draw spent).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass

from duo.core.prompt import prefill_steps, to_the_end
from duo.core.rounds import MainModel
from duo.core.sampling import Sampler, SamplingParams, adjusted
from duo.core.verify import verify
from duo.errors import PromptTooLong


@dataclass(frozen=True)
class Checked:
    """One verification's answer, in seed 003's terms."""

    accepted: int  # accepted_prefix_len
    preds: list[int]  # the main model's token at each draft position, and one past the last
    total: int  # total_tokens: the prompt and every committed token


class DraftedGeneration:
    """One client's generation on the lead: the committed tokens and the pending draw."""

    def __init__(self, prompt: Sequence[int], sampling: SamplingParams) -> None:
        self.tokens = list(prompt)
        self.prompt_len = len(prompt)
        self.params = sampling
        self.sampler: Sampler = sampling.sampler()
        self.pending: int | None = None  # drawn for the next position, not yet committed
        self.drafted = 0
        self.accepted = 0
        self.calls = 0

    def check(self, main: MainModel, draft: Sequence[int]) -> Checked:
        """Verify `draft` after the committed tokens on `main` (a sequence whose KV may hold
        anything: its shared prefix is kept); commit the accepted prefix."""
        checked: Checked = to_the_end(self.check_steps(main, draft))
        return checked

    def check_steps(self, main: MainModel, draft: Sequence[int]) -> Generator[None, None, Checked]:
        """`check`, its committed tokens read again (where the KV no longer holds them) a
        piece per step (duo.core.prompt.prefill_steps)."""
        if len(self.tokens) + len(draft) >= main.n_ctx:
            raise PromptTooLong(
                f"{len(self.tokens)} tokens and a draft of {len(draft)} do not fit the "
                f"context of {main.n_ctx}: start again with /prefill"
            )
        yield from prefill_steps(main, self.tokens)  # the KV: every committed token but the last
        logits = main.decode([self.tokens[-1], *draft])  # row i: the token at position i

        def sample_at(i: int) -> int:
            if i == 0 and self.pending is not None:
                return self.pending
            return self.sampler.sample(logits[i], [*self.tokens, *draft[:i]])

        verdict = verify(draft, sample_at)
        n = verdict.accepted
        preds = list(verdict.tokens)
        for i in range(n + 1, len(draft) + 1):  # past the disagreement: no draws
            preds.append(int(adjusted(logits[i], [*self.tokens, *draft[:i]], self.params).argmax()))
        self.tokens += draft[:n]
        self.pending = preds[n]
        main.truncate(len(self.tokens) - 1)
        self.drafted += len(draft)
        self.accepted += n
        self.calls += 1
        return Checked(n, preds, len(self.tokens))
