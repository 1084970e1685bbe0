"""Placement across processes: the lead judges each back as it judges its own drafter.

A back on a machine of its own costs the lead little; one that shares the lead's machine
(a `duo back` beside `duo lead`, the back `duo lead --rpcd` starts) takes cores the main
model could use, and its drafts are often too late to pay for them. So each back is
weighed as duo.session.share weighs the in-process drafter (one CoreShare per back, its
rounds those of the back's source): over windows of emitted tokens, the passes as they
were against what the main model alone would have taken for the same tokens. A back
whose drafts do not pay is told to rest (REST, duo.channel.protocol): it drafts nothing
and hears no commits (Backs.rest: it is caught up when it drafts again), and gets a look
now and then (a back on another machine sooner than the in-process drafter: after
`FIRST_LOOK` windows), at waits that double while its looks show no gain. A back is
judged `JUDGED` tokens after it joins.

A back that shares the machine and says how many threads it drafts on lends them to the
main model while it rests, where the lead chose the main model's threads
(ModelConfig.threads_lendable): the main model runs on the rest while the back drafts, on
every core while it rests, as with the in-process drafter. One back at a time lends; where
no threads can be moved the lead says so once, and only rests the back.

A back of protocol version 3 does not know REST: it is served as before, never judged.
Everything here runs on the engine thread (Session.after_pass).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from duo.channel.backs import Backs, BackState, Remote
from duo.core.policy import CostModel
from duo.core.rounds import Round
from duo.core.sharing import ALONE, SPLIT
from duo.llama.backend import Model
from duo.net import is_loopback, machine_id
from duo.session import share
from duo.session.share import CoreShare

log = logging.getLogger(__name__)

FIRST_LOOK = 2  # windows before a rested back's first look, on another machine

DRAFTING: BackState = "drafting"
RESTING: BackState = "resting"
LOOKING: BackState = "looking"


@dataclass(eq=False)
class RemoteHold:
    """A back as CoreShare holds it: REST frames, sent only when the state changes
    (Backs.rest, which also keeps a resting back from hearing every commit)."""

    backs: Backs
    remote: Remote

    def hold(self, held: bool) -> None:
        self.backs.rest(self.remote, held)


def shares_machine(remote: Remote) -> bool:
    """Whether the back runs on the lead's machine, as it says (from its machine's ID);
    a back that does not say, if it came over loopback."""
    if remote.machine:
        return remote.machine == machine_id()
    return is_loopback(remote.host)


class BackPlacement:
    """The judges of the connected backs that can rest, kept in step with `backs`."""

    def __init__(
        self,
        main: Model,
        backs: Backs,
        costs: Callable[[], CostModel],
        *,
        draft_max: int,
        lendable: int,
    ) -> None:
        """`costs`: the main model's measured pass costs (the policies'); `lendable`: the
        main model's threads a back on this machine may borrow from (0: none)."""
        self.main = main
        self.backs = backs
        self.costs = costs
        self.draft_max = draft_max
        self.lendable = lendable
        self.judges: dict[Remote, CoreShare] = {}
        self._seen: tuple[Remote, ...] = ()

    def observe(self, rounds: Sequence[Round]) -> list[str]:
        """After a pass of the main model: every judge weighs it. Returns the sources of
        the backs given a look (their policies should judge them afresh)."""
        remotes = self.backs.remotes
        if remotes is not self._seen:
            self._sync(remotes)
        looks = []
        for remote, judge in self.judges.items():
            before, judged = judge.state, judge.judged
            judge.observe(rounds)
            if judge.state != before or judge.judged != judged:
                self._report(remote, judge)
                if before == ALONE and judge.state == SPLIT:
                    looks.append(remote.source)
        return looks

    def _sync(self, remotes: tuple[Remote, ...]) -> None:
        self._seen = remotes
        for gone in self.judges.keys() - set(remotes):
            self.judges.pop(gone).release()
        for remote in remotes:
            if remote not in self.judges and remote.can_rest:
                self.judges[remote] = self._judge(remote)

    def _judge(self, remote: Remote) -> CoreShare:
        local = shares_machine(remote)
        threads = self.main.n_threads
        split = threads
        lender = any(j.lends for j in self.judges.values())
        if local and self.lendable and remote.threads and not lender:
            threads = self.lendable
            split = max(1, threads - remote.threads)
        elif local:
            log.info(
                "drafter %s shares this machine; %s, so it only rests where its drafts do not pay",
                remote.name,
                _fixed(self.lendable, remote.threads, lender),
            )
        judge = CoreShare(
            self.main,
            None,
            split=split,
            alone=threads,
            draft_max=self.draft_max,
            source=remote.source,
            draft_threads=remote.threads if split != threads else 0,
            # a look at a back on this machine costs what a look at the in-process
            # drafter costs (cores); at one elsewhere, only its rounds
            first_look=share.FIRST_LOOK if local else FIRST_LOOK,
            beside=local,
        )
        judge.costs = self.costs()
        judge.start(RemoteHold(self.backs, remote))
        remote.state, remote.why = DRAFTING, "not judged yet"
        return judge

    def _report(self, remote: Remote, judge: CoreShare) -> None:
        """Tell the pages what the judge made of the back, and the log when it starts or
        stops resting."""
        verdict = judge.verdict()
        state: BackState
        if judge.state == ALONE:
            lent = f"; the main model on {judge.alone} threads" if judge.lends else ""
            state, why = RESTING, f"its drafts do not pay ({verdict}){lent}"
        elif judge.looking:
            state, why = LOOKING, f"a look, after {judge.waited} tokens at rest"
        else:
            state, why = DRAFTING, f"its drafts pay ({verdict})"
        if RESTING in (state, remote.state) and state != remote.state:
            log.info("drafter %s %s: %s", remote.name, state, why)
        remote.state, remote.why = state, why


def _fixed(lendable: int, threads: int, lender: bool) -> str:
    """Why a back on this machine cannot have its threads lent, in words."""
    if not lendable:
        return "the main model's threads are fixed (-t, --pin, or on a GPU or rpc-servers)"
    if not threads:
        return "it does not say how many threads it drafts on"
    assert lender
    return "another back on this machine already borrows the main model's threads"
