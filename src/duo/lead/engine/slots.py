"""Which of the main model's slots a request (or a call) takes, as llama-server picks, and
what happens to the KV cells of the others."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from duo.core.draft import common_prefix


class SlotModel(Protocol):
    """What the choice needs of the main model (duo.llama.backend.Model, or a fake)."""

    @property
    def seqs(self) -> list[list[int]]: ...

    @property
    def deterministic(self) -> bool: ...

    def fork(self, src: int, dst: int, n: int) -> None: ...

    def park(self, seq: int, limit: int) -> bool: ...


class SlotChoice:
    """The slot `asked` for, if it is free; else the free slot whose cached tokens share
    the longest prefix with the prompt (as llama-server picks); of slots that share as
    much, the one taken longest ago (one never taken first, as llama-server's LRU), so
    that a prompt sharing nothing with the cached ones (a raw prompt among chats) does not
    take the slot that holds what the chats share. Unless `share` is False (cache_prompt
    off), if another slot, running or not, holds a longer prefix, the free slot takes it
    over: the KV cells are shared or copied, not computed again (a system prompt every
    session sends is read once, not once per slot). A deterministic model shares nothing:
    a slot's results would then depend on how another slot read its prompt. The other
    free slots are parked in host memory, up to `cache_bytes` of them (as llama-server's
    --cache-idle-slots and --cache-ram)."""

    def __init__(self, main: SlotModel, slots: int, cache_bytes: int) -> None:
        self.main = main
        self.slots = slots
        self.cache_bytes = cache_bytes
        self._taken = [0] * slots  # when each slot was last taken (_takes then; 0: never)
        self._takes = 0

    def take(
        self, prompt: list[int], free: Sequence[int], asked: int | None = None, share: bool = True
    ) -> int:
        main = self.main
        shared = [common_prefix(main.seqs[s], prompt) for s in range(self.slots)]
        slot = max(free, key=lambda s: (shared[s], -self._taken[s]))
        if asked is not None and asked in free:
            slot = asked
        self._takes += 1
        self._taken[slot] = self._takes
        best = max(range(self.slots), key=shared.__getitem__)
        n = min(shared[best], len(prompt) - 1)  # the last token is always fed again
        if share and not main.deterministic and n > shared[slot]:
            main.fork(best, slot, n)
        for idle in free:  # their cells would slow every pass (duo.llama.backend.Model.park)
            if idle != slot:
                main.park(idle, self.cache_bytes)
        return slot
