"""What the lead's engine drives: the session (duo.session.Session, or a test's fake) and
its main model, as Protocols."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from duo.core.logprobs import TokenLogprob
from duo.core.rounds import BatchModel, Generation, MainModel, Round
from duo.core.sampling import SamplingParams
from duo.lead.engine.schedule import Room
from duo.lead.engine.slots import SlotModel


class EngineModel(BatchModel, SlotModel, Protocol):
    """What the engine needs of the main model (duo.llama.backend.Model, or a fake)."""

    @property
    def vocab(self) -> Any: ...  # its `piece(token)` spells a token

    def sequence(self, seq: int) -> MainModel: ...

    def truncate(self, n: int, seq: int = 0) -> None: ...


class SessionSpec(Protocol):
    @property
    def main_cores(self) -> frozenset[int] | None: ...


class EngineSession(Protocol):
    """What the engine drives (duo.session.Session, or a fake)."""

    @property
    def main(self) -> EngineModel: ...

    @property
    def slots(self) -> int: ...

    @property
    def spec(self) -> SessionSpec: ...

    def ready(self) -> None: ...

    def costs(self) -> Room: ...

    def generation(
        self,
        prompt: list[int],
        max_tokens: int,
        sampling: SamplingParams,
        slot: int = 0,
        record: list[TokenLogprob] | None = None,
    ) -> Generation: ...

    def after_pass(self, rounds: Sequence[Round]) -> None: ...
