"""The copy pointer: an output that copies its context is followed past ambiguous keys
and through small edits (duo.drafting.copying), next to the n-gram lookup."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from duo.core.draft import Proposal
from duo.drafting.copying import EDITED, LONG, MAX_MISSES, REDONE, SHORT
from duo.drafting.lookup import NGRAM, NgramDrafts
from duo.drafting.sources import Sources
from duo.llama.calibrate import spread

# A context whose 3-token key (7, 7, 7) occurs twice, followed by 3 and then by 4.
SOURCE = [10, 7, 7, 7, 3, 11, 7, 7, 7, 4]


def copying(
    output: list[int], n_max: int = 3, source: list[int] = SOURCE
) -> tuple[NgramDrafts, list[int]]:
    """Drafts over `source` whose output so far is `output`, committed token by token."""
    drafts = NgramDrafts(2, n_max)
    context = source + output[:2]
    drafts.begin(context)
    drafts.propose(context, 4)  # the lookup finds where the copy starts
    for token in output[2:]:
        drafts.commit(len(context), [token])
        context.append(token)
        drafts.propose(context, 4)
    return drafts, context


def test_a_long_copy_is_followed_where_the_lookup_takes_the_latest_occurrence() -> None:
    drafts, context = copying([10, 7, 7, 7])
    assert drafts.index.lookup(4) is not None
    assert drafts.index.lookup(4).tokens[0] == 4  # type: ignore[union-attr]  # the latest: wrong
    [proposal] = drafts.propose(context, 4)  # a run longer than any key: the copy alone
    assert (proposal.source, proposal.tokens, proposal.grade) == (NGRAM, (3, 11, 7, 7), LONG)


def test_where_copy_and_lookup_agree_the_lookup_proposes_alone() -> None:
    drafts, context = copying([10, 7, 7])
    [proposal] = drafts.propose(context, 3)
    assert (proposal.tokens, proposal.grade) == ((7, 3, 11), 3)  # graded by its key


def test_a_substituted_token_resumes_the_copy_after_it() -> None:
    drafts, context = copying([10, 7, 7, 7, 50])  # 3 became 50, as load_ became read_
    assert [(p.tokens, p.grade) for p in drafts.propose(context, 3)] == [((11, 7, 7), EDITED)]
    drafts.commit(len(context), [11])
    [proposal] = drafts.propose([*context, 11], 3)
    assert (proposal.tokens, proposal.grade) == ((7, 7, 7), SHORT)  # no key found it


def test_left_out_tokens_are_skipped() -> None:
    drafts, context = copying([10, 7, 7, 7, 11])  # 3 left out
    [proposal] = drafts.propose(context, 2)
    assert (proposal.tokens, proposal.grade) == ((7, 7), SHORT)


def test_an_output_that_leaves_the_copy_loses_the_pointer() -> None:
    drafts, context = copying([10, 7, 7, 7, *[60 + i for i in range(MAX_MISSES + 1)]])
    assert drafts.copy.src is None
    assert drafts.propose(context, 4) == []  # and the new tokens occurred nowhere


# A file in which the token 3 occurs twice (a name the edit changes everywhere).
FILE = [20, 21, 3, 22, 23, 24, 3, 25, 26]


def test_an_edit_the_copy_confirmed_is_made_again() -> None:
    drafts, context = copying([20, 21, 50, 22, 23, 24], source=FILE)  # 3 became 50
    copy, lookup = drafts.propose(context, 3)  # the lookup's key (23, 24) knows no edits
    assert (copy.tokens, copy.grade, lookup.tokens) == ((50, 25, 26), REDONE, (3, 25, 26))
    drafts.commit(len(context), [3])  # ...but this time the output kept it
    assert drafts.copy.edits == {}  # the edit is forgotten
    assert drafts.propose([*context, 3], 2)[0].tokens == (25, 26)


def test_a_substitution_the_copy_did_not_confirm_is_not_made_again() -> None:
    drafts, context = copying([20, 21, 50, 51, 23, 24], source=FILE)  # two tokens differ
    assert [p.tokens for p in drafts.propose(context, 3)] == [(3, 25, 26)]
    drafts.begin(context)  # a new request forgets the edits
    assert drafts.copy.edits == {}


class Recorder:
    def __init__(self) -> None:
        self.limits: list[int] = []

    def begin(self, prompt: Sequence[int]) -> None: ...
    def commit(self, start: int, tokens: Sequence[int]) -> None: ...
    def end(self) -> None: ...
    def rest(self, resting: frozenset[str]) -> None: ...
    def received(self) -> dict[str, int]:
        return {}

    def propose(self, committed: Sequence[int], limit: int) -> list[Proposal]:
        self.limits.append(limit)
        return []


def test_each_source_proposes_at_most_its_own_cap() -> None:
    lookup, model = Recorder(), Recorder()
    sources = Sources([lookup, model], caps=[16, 8])
    sources.propose([1], 16)
    sources.propose([1], 5)  # near max_tokens the room is less than either cap
    assert (lookup.limits, model.limits) == ([16, 5], [8, 5])


def test_calibration_measures_every_small_batch_then_spreads_out() -> None:
    assert spread(9) == list(range(1, 10))
    sizes = spread(33)
    assert sizes[:9] == list(range(1, 10)) and sizes[-1] == 33 and len(sizes) < 15
    assert all(b / a <= 1.5 for a, b in itertools.pairwise(sizes[8:]))
