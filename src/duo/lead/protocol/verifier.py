"""The verifier API's answers (seed 003's shapes; duo.lead.verifier): typed dicts, as
duo.lead.protocol.openai's.

    Prefilled      POST /prefill
    Verified       POST /verify
    VerifierStats  GET /stats
"""

from __future__ import annotations

from typing import Any, TypedDict


class Prefilled(TypedDict):
    prompt_len: int
    prompt_ids: list[int]
    session: str


class Verified(TypedDict):
    accepted_prefix_len: int  # draft tokens the main model accepts (and the lead commits)
    preds: list[int]  # its own token at each draft position, and one past the last
    total_tokens: int  # the prompt and every committed token
    session: str


class VerifierStats(TypedDict):
    verifications: int
    drafted: int
    accepted: int
    acceptance_rate: float
    tokens_per_verification: float
    tokens_per_second: float  # accepted tokens over the sessions' lives
    sessions: dict[str, dict[str, Any]]  # the same by live session, with its token counts
