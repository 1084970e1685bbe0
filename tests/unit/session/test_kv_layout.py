"""Whether a lead's slots share one KV buffer, by the measured cost of a pass."""

from __future__ import annotations

from duo.core.policy import CostModel
from duo.session.session import one_buffer_pays

# qwen-coder-1.5b on 2 cores of an AVX2 CPU (ms): a pass costs about as much per token at
# any size, so a pass split in two costs what one batch does.
AVX2 = {1: 53, 2: 90, 3: 120, 4: 163, 5: 239, 6: 330, 7: 319, 8: 595, 9: 592, 13: 792}
# A GPU, or a CPU whose batches cost little more than one token: splitting a pass in two
# reads the weights twice.
BATCHED = {1: 10, 2: 11, 4: 12, 8: 14, 9: 15, 13: 17}


def costs(ms: dict[int, int]) -> CostModel:
    return CostModel({n: t / 1000 for n, t in ms.items()})


def test_a_buffer_each_where_a_split_pass_costs_what_one_batch_does() -> None:
    assert not one_buffer_pays(costs(AVX2), slots=4, draft_max=8)


def test_one_buffer_where_a_batch_costs_less_per_token_the_larger_it_is() -> None:
    assert one_buffer_pays(costs(BATCHED), slots=4, draft_max=8)
    assert one_buffer_pays(costs(BATCHED), slots=2, draft_max=3)


def test_a_buffer_each_where_every_token_costs_the_same() -> None:
    """Linear costs: the split pass costs one batch's less a token's share, never more."""
    linear = CostModel({1: 0.05, 2: 0.1, 4: 0.2, 8: 0.4, 16: 0.8})
    assert not one_buffer_pays(linear, slots=4, draft_max=8)
