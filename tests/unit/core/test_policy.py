from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from duo.core.choice import AdaptivePolicy, PerSource
from duo.core.draft import Proposal
from duo.core.policy import (
    Acceptance,
    Base,
    CostModel,
    Doubts,
    StreakAcceptance,
    best_length,
    expected_tokens,
)


def test_cheap_batches_verify_the_whole_draft() -> None:
    # A GPU-like cost curve: a batch of 9 costs barely more than one token.
    costs = CostModel({1: 0.010, 9: 0.012})
    assert best_length(8, costs.cost, lambda i: 0.9) == 8


def test_expensive_batches_skip_unlikely_drafts() -> None:
    # A compute-bound CPU: two tokens cost 2.5x one.
    costs = CostModel({1: 0.013, 2: 0.034, 5: 0.040, 9: 0.068})
    assert best_length(8, costs.cost, lambda i: 0.5) == 0
    # ...but a drafter that is nearly always right still pays off.
    assert best_length(4, costs.cost, lambda i: 0.97) == 4


def test_a_draft_beside_a_prompt_pays_for_what_it_adds_not_a_share_of_the_prompt() -> None:
    # A CPU: a pass costs about its tokens. A draft right half the time does not pay alone;
    # beside a 400-token prompt it is only 2% more of that pass, but still much more time
    # (6 ms a token, 8 alone): it is still not verified. A draft nearly always right is.
    costs = CostModel({1: 0.010, 2: 0.018, 9: 0.060, 401: 2.0, 409: 2.048})
    prompt = Base(0.0, 0, 400)
    assert best_length(8, costs.cost, lambda i: 0.5) == 0
    assert best_length(8, costs.cost, lambda i: 0.5, prompt) == 0
    assert best_length(8, costs.cost, lambda i: 0.5, Base(0.0, 400)) > 0  # as a share
    assert best_length(8, costs.cost, lambda i: 0.97, prompt) >= 4
    assert prompt.cost(costs.cost, 1) == pytest.approx(costs.cost(1))


def test_a_draft_beside_a_prompt_costs_at_least_the_passs_tokens_on_average() -> None:
    # Passes of 18 to 24 tokens measured once each (a lead's first rounds, beside prompts
    # of all lengths): the table is flat from 18 on, where each token costs about 8 ms.
    costs = CostModel({1: 0.027, 9: 0.090, 17: 0.160, 18: 0.171, 20: 0.150, 24: 0.170})
    prompt = Base(0.0, 0, 17)
    assert costs.cost(21) - costs.cost(18) == pytest.approx(0.0)  # flat: drafts look free
    assert prompt.cost(costs.cost, 4) == pytest.approx(0.027 + 3 * 0.171 / 18)
    unlikely = [0.2, 0.7, 0.7, 0.7, 0.7]  # a first token right a fifth of the time
    assert best_length(5, costs.cost, lambda i: unlikely[i], prompt) == 0
    assert best_length(5, costs.cost, lambda i: 0.95, prompt) > 0  # a likely one still is


def _every_length(available: int, cost: CostModel, p: list[float], base: Base) -> int:
    """best_length without its early stop: every length tried."""
    rates = [
        (base.expected + expected_tokens(n, p.__getitem__)) / base.cost(cost.cost, n + 1)
        for n in range(available + 1)
    ]
    return rates.index(max(rates))


@given(
    st.lists(st.sampled_from([0.0, 0.0, 0.2, 0.5, 1.0, 2.0]), min_size=17, max_size=17),
    st.lists(st.sampled_from([0.0, 0.3, 0.5, 0.8, 0.95, 1.0]), min_size=16, max_size=16),
    st.integers(0, 16),
    st.tuples(st.sampled_from([0.0, 2.5]), st.integers(0, 6), st.sampled_from([0, 0, 30])),
)
@example([1.0] + [0.0] * 16, [0.3] + [1.0] * 15, 2, (0.0, 0, 0))  # 1 token loses, 2 win
@settings(max_examples=400)
def test_the_best_length_stops_early_only_where_no_longer_draft_can_win(
    steps: list[float], p: list[float], available: int, base: tuple[float, int, int]
) -> None:
    # Costs that stay flat over some sizes and jump at others, so that a longer draft
    # can win after shorter ones did not.
    costs = CostModel({n: 2.0 + sum(steps[: n - 1]) for n in range(1, 18)})
    pass_ = Base(*base)
    assert best_length(available, costs.cost, p.__getitem__, pass_) == _every_length(
        available, costs, p, pass_
    )


def test_cost_model_interpolates_extrapolates_and_learns() -> None:
    costs = CostModel({1: 1.0, 3: 3.0})
    assert costs.cost(2) == pytest.approx(2.0)
    assert costs.cost(6) == pytest.approx(6.0)
    costs.observe(1, 2.0)
    assert 1.0 < costs.cost(1) < 2.0


def test_cost_model_room_keeps_a_pass_within_its_stretch() -> None:
    costs = CostModel({1: 10.0, 4: 20.0, 8: 40.0})
    # A pass of 4 costs 20; up to 40 it can take 4 more tokens (8 costs 40), not 5.
    assert costs.room(4, 2.0, most=100) == 4
    assert costs.room(4, 2.0, most=2) == 2
    assert costs.room(8, 1.0, most=100) == 0
    assert costs.room(8, math.inf, most=504) == 504  # no bound: a prompt's whole batch


def test_cost_model_room_against_a_larger_reference_pass() -> None:
    costs = CostModel({1: 10.0, 4: 20.0, 8: 40.0})
    # One request decodes while three read their prompts: a piece may stretch the pass to
    # twice what a round of all four will cost (40, a pass of 8), not twice one token's.
    assert costs.room(1, 2.0, most=100) == 3  # within 20 (a pass of 4)
    assert costs.room(1, 2.0, most=100, reference=4) == 7  # within 40
    assert costs.room(4, 2.0, most=100, reference=1) == 4  # never less than its own


def test_a_pass_never_costs_less_than_a_smaller_one() -> None:
    # A noisy measurement (5 timed faster than 4) must not make 5 look cheaper.
    costs = CostModel({1: 1.0, 4: 3.0, 5: 2.8, 8: 4.0})
    sizes = [costs.cost(b) for b in range(1, 12)]
    assert sizes == sorted(sizes)
    assert costs.cost(5) == pytest.approx(3.0)
    costs.observe(4, 2.0)  # new measurements count at once
    assert costs.cost(4) == pytest.approx(2.5)


def test_a_timed_cost_is_averaged_with_the_passes_measured_then_moves_with_them() -> None:
    costs = CostModel({1: 1.0, 3: 3.0}, smoothing=0.1)
    for _ in range(3):
        costs.observe(3, 4.0)
    assert costs.cost(3) == pytest.approx((3.0 + 3 * 4.0) / 4)  # the mean of the four
    for _ in range(6):
        costs.observe(3, 4.0)
    before = costs.cost(3)  # ten timings: from now on a moving average
    costs.observe(3, 5.0)
    assert costs.cost(3) == pytest.approx(before + 0.1 * (5.0 - before))
    costs.observe(2, 1.5)  # a size never timed: its first pass sets it
    assert costs.cost(2) == pytest.approx(1.5)
    costs.reset({1: 1.0, 3: 3.0})  # timed afresh: the measurements start over
    costs.observe(3, 4.0)
    assert costs.cost(3) == pytest.approx(3.5)


@given(
    st.dictionaries(st.integers(2, 16), st.floats(0.5, 40), max_size=6),
    st.lists(st.tuples(st.integers(1, 20), st.floats(0.5, 40), st.booleans()), max_size=30),
)
def test_costs_updated_round_by_round_equal_costs_tabulated_afresh(
    measured: dict[int, float], observed: list[tuple[int, float, bool]]
) -> None:
    costs = CostModel({1: 2.0, **measured})
    costs.cost(1)  # the table exists: observe updates it in place
    for batch, seconds, asked in observed:
        costs.observe(batch, seconds)
        if asked:  # else several sizes' passes wait for the next cost asked
            fresh = CostModel(costs.seconds)
            assert [costs.cost(b) for b in range(1, 24)] == pytest.approx(
                [fresh.cost(b) for b in range(1, 24)]
            )
    fresh = CostModel(costs.seconds)
    assert [costs.cost(b) for b in range(1, 24)] == pytest.approx(
        [fresh.cost(b) for b in range(1, 24)]
    )


def test_a_grade_seen_little_starts_from_its_sources_acceptance() -> None:
    source = Acceptance(prior=0.7)
    grade = Acceptance(prior=0.7, parent=source)
    for _ in range(40):
        Acceptance(prior=0.7, parent=source).observe(1, 0)  # other grades: rejected
    assert source.p(0) < 0.1
    assert grade.p(0) == pytest.approx(source.p(0))  # never seen: its source's estimate
    for _ in range(40):
        grade.observe(1, 1)  # its own evidence wins
    assert grade.p(0) > 0.9


def test_estimates_follow_what_any_table_they_build_on_hears() -> None:
    def chain() -> tuple[Acceptance, Acceptance]:
        root = Acceptance(prior=0.7)
        grade = Acceptance(prior=0.7, parent=Acceptance(prior=0.7, parent=root))
        grade.observe(3, 3)
        return root, grade

    def others_rejected(root: Acceptance) -> None:  # another source, under the same root
        for _ in range(20):
            Acceptance(prior=0.7, parent=root).observe(3, 0)

    root, grade = chain()
    before = grade.p(0)  # read once: the estimates are kept until something changes
    others_rejected(root)
    fresh_root, fresh = chain()
    others_rejected(fresh_root)
    assert grade.p(0) < before
    assert [grade.p(i) for i in range(5)] == [fresh.p(i) for i in range(5)]


def _afresh(table: Acceptance, i: int) -> float:
    """What p(i) is by definition, from the counts (no memo): the prior blended with the
    counts at a tested position, the parent's estimate or the deepest tested one beyond;
    a request's own counts (Doubts) never above the parent's."""
    parent = table.parent
    if i < len(table.tested):
        prior = table.prior if parent is None else _afresh(parent, i)
        value = (table.accepted[i] + prior * table.weight) / (table.tested[i] + table.weight)
    elif parent is not None:
        value = _afresh(parent, i)
    else:
        value = _afresh(table, len(table.tested) - 1) if table.tested else table.prior
    if isinstance(table, Doubts) and parent is not None:
        value = min(value, _afresh(parent, i))
    return value


observations = st.lists(
    st.tuples(
        st.sampled_from(["root", "source", "grade", "request"]),
        st.integers(1, 8),  # drafted
        st.integers(0, 8),  # accepted
        st.integers(0, 4),  # start
        st.booleans(),  # read the estimates after it
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(observations)
def test_estimates_read_now_and_then_equal_estimates_worked_out_afresh(
    steps: list[tuple[str, int, int, int, bool]],
) -> None:
    """Each estimate is worked out when first asked for and kept until any table it builds
    on hears something: whatever was read before, and whichever table heard it, what is
    read equals the definition."""
    root = Acceptance(prior=0.7)
    source = Acceptance(prior=0.6, parent=root)
    grade = Acceptance(prior=0.5, parent=source)
    request = Doubts(weight=4.0, parent=grade)
    tables = {"root": root, "source": source, "grade": grade, "request": request}
    for name, drafted, accepted, start, read in steps:
        tables[name].observe(drafted, min(accepted, drafted), start)
        if read:
            for table in (request, grade, root):
                for i in range(0, 14, 3):
                    assert table.p(i) == pytest.approx(_afresh(table, i))
    for table in tables.values():
        assert [table.p(i) for i in range(14)] == pytest.approx(
            [_afresh(table, i) for i in range(14)]
        )


def test_acceptance_counts_only_tested_positions() -> None:
    acc = Acceptance(prior=0.5, weight=0.0001)
    acc.observe(drafted=4, accepted=1)  # pos 0 accepted, pos 1 rejected, 2-3 untested
    assert acc.p(0) == pytest.approx(1.0, abs=1e-3)
    assert acc.p(1) == pytest.approx(0.0, abs=1e-3)
    assert acc.p(2) == pytest.approx(0.5)


def test_adaptive_policy_explores_less_while_drafts_do_not_pay() -> None:
    policy = AdaptivePolicy(
        CostModel({1: 0.01, 2: 0.05}), Acceptance(prior=0.1), explore_every=4, explore_max=16
    )
    choices = [policy.choose(3) for _ in range(60)]
    explored = [i for i, c in enumerate(choices) if c == 3]
    assert set(choices) == {0, 3}
    # Intervals 4, then 8, then 16, 16, ...: backing off, capped.
    assert [b - a for a, b in itertools.pairwise(explored)][:3] == [8, 16, 16]
    assert explored[0] == 3
    assert policy.choose(0) == 0


def test_adaptive_policy_uses_drafts_that_pay() -> None:
    policy = AdaptivePolicy(CostModel({1: 0.010, 5: 0.011}), Acceptance(prior=0.9))
    assert [policy.choose(4) for _ in range(10)] == [4] * 10


def test_streak_acceptance_is_kept_apart_after_whole_and_cut_drafts() -> None:
    acc = StreakAcceptance(prior=0.5, weight=0.0001)
    for _ in range(5):  # streaks of three whole drafts, then three wrong at once
        for accepted in (4, 4, 4, 0, 0, 0):
            acc.observe(4, accepted)
    acc.observe(2, 2)
    assert acc.streak and acc.p(0) > 0.6  # after a whole draft, 2 in 3 were whole
    acc.observe(3, 1)
    assert not acc.streak and acc.p(0) < 0.4  # after a cut one, 2 in 3 were wrong at once
    acc.observe(0, 0)  # nothing verified: nothing learnt, the state stays
    assert not acc.streak


def test_a_skipped_draft_still_teaches_the_policy_its_first_token() -> None:
    # Batches too dear for drafts that are right half the time: every offer is skipped...
    policy = AdaptivePolicy(
        CostModel({1: 0.010, 2: 0.025, 9: 0.026}), StreakAcceptance(prior=0.5), explore_every=10**9
    )
    assert policy.choose(8) == 0
    # ...but the lead sees whether the drafter's first guess equals its own token. Right
    # again and again: a streak, in which drafts pay.
    for _ in range(20):
        policy.observe(0, 0, next_agreed=True)
    assert policy.choose(8) > 0
    policy.observe(8, 3)  # cut: back to the cautious estimates
    assert policy.choose(8) == 0


def test_a_drafter_whose_drafts_never_pay_rests_longer_each_time() -> None:
    policy = AdaptivePolicy(
        CostModel({1: 0.01, 2: 0.05}),
        Acceptance(prior=0.1),
        explore_every=10**9,
        rest_after=4,
        rest_rounds=3,
        rest_max=6,
    )

    def rounds_resting() -> int:
        n = 0
        while not policy.wants_drafts:
            policy.observe(0, 0)
            n += 1
        return n

    for _ in range(3):
        assert policy.choose(5) == 0 and policy.wants_drafts
    assert policy.choose(5) == 0 and not policy.wants_drafts  # the 4th skip in a row
    assert rounds_resting() == 3
    for _ in range(4):
        policy.choose(5)
    assert rounds_resting() == 6  # twice as long
    for _ in range(4):
        policy.choose(5)
    assert rounds_resting() == 6  # capped


def test_a_drafter_given_its_cores_back_is_judged_afresh_not_left_resting() -> None:
    """Held for its cores, an in-process drafter has nothing ready round after round, and
    its policy rests it, longer each time. When it gets its cores back (a look at
    whether it pays), its policy wakes it: no rest left, its next rest a short one."""
    chooser = PerSource(CostModel({1: 0.01, 2: 0.05}), frozenset({"ngram"}))
    chooser.choose([Proposal("model", (1, 2)), Proposal("ngram", (3,), 2)])
    for _ in range(200):  # held: nothing from the drafter, a lookup now and then
        chooser.choose([])
        chooser.observe(None, 0, 0, 0.01, [], [5], 1)
    assert chooser.resting == {"model"}
    chooser.wake("ngram")  # another source's wake leaves it resting
    assert chooser.resting == {"model"}
    chooser.wake("model")
    assert chooser.resting == frozenset()
    for _ in range(16):  # then a first rest as after a start, not one doubled 3 times
        chooser.choose([])
        chooser.observe(None, 0, 0, 0.01, [], [5], 1)
    assert chooser.resting == {"model"}
    assert chooser.policy("model")._resting == 32 - 1  # one round of it observed


def test_a_drafter_whose_drafts_pay_never_rests() -> None:
    policy = AdaptivePolicy(CostModel({1: 0.010, 9: 0.011}), Acceptance(prior=0.9), rest_after=2)
    for _ in range(50):
        assert policy.choose(8) > 0 and policy.wants_drafts
        policy.observe(8, 8)


def test_a_slots_streak_starts_where_the_shared_counts_stand() -> None:
    # Counts learnt from a recorded trace end in a streak (or not); a policy sharing them
    # starts there, then keeps a streak of its own while learning into the shared counts.
    learnt = StreakAcceptance(prior=0.5)
    learnt.observe(4, 4)
    slot = StreakAcceptance(shared=learnt)
    assert slot.streak and slot.current.parent is learnt.after_whole
    slot.observe(4, 1)
    assert not slot.streak and learnt.streak
    # The cut draft came during the streak: counted in the shared after-whole table.
    assert learnt.after_whole.tested[:3] == [1, 1, 0]  # positions 0 and 1 tested, 0 right
    assert learnt.after_whole.accepted[:2] == [1, 0]
    assert not StreakAcceptance(shared=StreakAcceptance()).streak


def test_a_lookups_streak_ends_with_a_round_it_proposes_nothing_in() -> None:
    """A lookup's proposal accepted whole starts a streak; a round in which it has no
    proposal ends it (the text left what it was copying). A model drafter's streak
    outlasts a round whose draft was not ready."""
    chooser = PerSource(CostModel({1: 0.01, 9: 0.011}), always_ready=frozenset({"ngram"}))
    copy, model = Proposal("ngram", (1, 2, 3), 5), Proposal("model", (4, 5, 6))

    def streaks() -> tuple[bool, ...]:
        return tuple(chooser.policy(p.key).acceptance.streak for p in (copy, model))

    chooser.observe(copy, 3, 3, 0.011, [copy], [1, 2, 3, 7], 4)
    chooser.observe(model, 3, 3, 0.011, [model], [4, 5, 6, 7], 4)
    assert streaks() == (False, True)  # the lookup had nothing in the second round
    chooser.observe(copy, 3, 3, 0.011, [copy], [1, 2, 3, 7], 4)
    assert streaks() == (True, True)  # nor had the model drafter: its streak stays
    chooser.observe(None, 0, 0, 0.01, [], [7], 1)
    assert streaks() == (False, True)


def test_a_draft_tail_no_round_verified_is_compared_with_the_next_rounds_tokens() -> None:
    """A copy verified 2 tokens a round: its draft's deeper positions are learnt from what
    the next rounds emit, so the policy can find that longer drafts would pay."""
    chooser = PerSource(CostModel({1: 0.01, 9: 0.011}), always_ready=frozenset({"ngram"}))
    copy = Proposal("ngram", (1, 2, 3, 4, 5, 6, 7), 50)
    table = chooser.policy(copy.key).acceptance.current  # not in a streak yet
    chooser.observe(copy, 2, 2, 0.01, [copy], [1, 2, 3], 3)  # 1, 2 verified; 3 its bonus
    assert table.tested[:3] == [1, 1, 1] and table.tested[3:] == []
    chooser.observe(None, 0, 0, 0.01, [], [4, 5], 1)  # the tail: 4, 5 right...
    assert table.tested[3:5] == [1, 1] and table.accepted[3:5] == [1, 1]
    chooser.observe(None, 0, 0, 0.01, [], [6, 9], 1)  # ...then 6 right, 7 wrong
    assert table.tested[5:] == [1, 1] and table.accepted[5:] == [1, 0]
    assert chooser._tails == []  # over
    parent = chooser.learnt["ngram"].after_rejection  # the source's own table hears too
    assert parent.tested[:7] == [1] * 7


def test_every_draft_tail_is_followed_to_its_end_while_the_next_rounds_start_their_own() -> None:
    """A copy of a file, verified 2 tokens a round, each round proposing the next 12
    tokens: every round's tail is followed as far as the copy goes, not only until the
    next round's tail replaces it, so positions far deeper than a round reaches are tested
    (followed one round each, the positions past 5 stayed at whatever they were long ago:
    on a code edit, a deep position once tried sat at 0.76 and the policy verified 2
    tokens a round where the copy ran right for hundreds)."""
    chooser = PerSource(CostModel({1: 0.01, 9: 0.011}), always_ready=frozenset({"ngram"}))
    text = list(range(100, 160))
    for at in range(0, 30, 3):
        copy = Proposal("ngram", tuple(text[at : at + 12]), 50)
        chooser.observe(copy, 2, 2, 0.01, [copy], text[at : at + 3], 3)
    table = chooser.learnt["ngram"].after_whole  # every round after the first in a streak
    assert len(table.tested) == 12 and min(table.tested) > 0
    assert table.accepted == table.tested  # all right
    assert table.tested[11] >= 5  # the deepest position, tested by several tails


def test_per_source_explores_a_source_that_does_not_pay_as_often_as_asked() -> None:
    def verified(explore_every: int) -> list[int]:
        learnt = {"model": StreakAcceptance(prior=0.1)}
        chooser = PerSource(
            CostModel({1: 0.01, 2: 0.05}), learnt=learnt, explore_every=explore_every
        )
        offer = [Proposal("model", (1, 2, 3))]
        return [i for i in range(12) if chooser.choose(offer).n]

    assert verified(4) == [3, 11]  # the 4th offer, then 8 later (backing off)
    assert verified(8) == [7]
    assert verified(10**9) == []


def test_positions_no_draft_reached_yet_are_as_likely_as_the_deepest_one_tested() -> None:
    """A copy accepted whole, three tokens at a time: the fourth position and beyond are
    taken at the third's rate, not at the flat prior, so the next draft may be longer."""
    a = Acceptance(prior=0.5)
    for _ in range(20):
        a.observe(3, 3)
    assert a.p(2) > 0.85 and a.p(3) == a.p(10) == a.p(2)
    child = Acceptance(parent=a)  # a grade never seen: its source's estimate, as deep
    assert child.p(7) == a.p(2)
    costs = CostModel({1: 1.0, 9: 1.6, 17: 2.4})
    assert best_length(16, costs.cost, a.p) > 3
    assert Acceptance(prior=0.5).p(5) == 0.5  # nothing tested at all: the prior


def test_a_lookup_wrong_all_through_a_request_stops_being_verified_in_it() -> None:
    """Acceptance depends on the text: a lookup right at its first token three times in
    four over the requests so far is wrong every time in an answer that copies nothing.
    Its own rounds soon outweigh the shared counts in that request (LOCAL); the next
    request starts from the shared counts again, which heard the failures too."""
    costs = CostModel({1: 0.0078, 4: 0.0133})  # the default pair's passes
    draft = Proposal("ngram", (5, 6, 7), 3)

    def play(chooser: PerSource, right: bool) -> int:
        """A round whose next tokens are 5, 99 (`right`: the first draft token) or 9."""
        n = chooser.choose([draft]).n
        truth = (5, 99) if right else (9,)
        accepted = 0
        while accepted < n and truth[accepted] == draft.tokens[accepted]:
            accepted += 1
        emitted = truth[: accepted + 1]
        chooser.observe(
            draft if n else None, n, accepted, costs.cost(n + 1), [draft], emitted, n + 1
        )
        return n

    chooser = PerSource(costs, frozenset({"ngram"}))
    chooser.begin()
    assert all(play(chooser, i % 4 != 3) for i in range(40))  # worth a token a round
    learnt = chooser.learnt["ngram/3"].after_rejection
    before = learnt.p(0)
    chooser.begin()
    verified = [play(chooser, False) for _ in range(10)]
    assert verified[-3:] == [0, 0, 0] and sum(verified) <= 7
    assert learnt.p(0) < before  # the shared counts heard them too
    assert learnt.p(0) > 0.5  # but still rate the lookup by every request
    chooser.begin()
    assert play(chooser, False) == 1


def test_a_requests_own_counts_lower_the_shared_estimate_and_never_raise_it() -> None:
    shared = Acceptance(prior=0.5)
    request = Doubts(weight=4, parent=shared)
    for _ in range(5):
        request.observe(2, 2)  # right every time in this request
    assert request.p(0) == shared.p(0) and request.p(1) == shared.p(1)
    assert shared.p(0) > 0.5  # the shared counts heard it
    for _ in range(8):
        request.observe(2, 0)
    assert request.p(0) < shared.p(0)
