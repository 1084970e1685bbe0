"""`duo lead`'s composition root: every part of the lead, built from its config in one place."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.applications import Starlette

from duo.auth import as_keys
from duo.channel.backs import Backs
from duo.channel.endpoint import DrafterEndpoint
from duo.mailbox import Mailboxes
from duo.service.api import Api
from duo.service.feed import Feed
from duo.service.lead import Console, Lead, LeadConfig
from duo.service.metrics import Metrics
from duo.service.session import Session
from duo.service.web import Web


@dataclass(frozen=True)
class LeadService:
    lead: Lead
    app: Starlette
    feed: Feed  # the web page's live events; close() it when the server is to stop

    def close(self) -> None:
        self.lead.close()


def build_lead(config: LeadConfig) -> LeadService:
    """Load the models and wire the engine, the drafter channel and the API together."""
    backs = Backs()
    session = Session(config.models, config.spec, remote=backs, slots=config.parallel)
    try:
        main = session.main
        keys = as_keys(config.api_key)
        mail = Mailboxes()  # the engine's messages, to clients and backs alike
        drafters = DrafterEndpoint(
            backs,
            n_vocab=main.n_vocab,
            fingerprint=main.vocab.fingerprint,
            refusal=keys.drafter_refusal,
            mail=mail,
        )
        metrics = Metrics(drafters.wire, lambda: backs.connected, session.local is not None)
        console = Console(config.color, slots=config.parallel) if config.console else None
        lead = Lead(session, backs, metrics, mail, console)
    except BaseException:
        session.close()
        raise
    app = Api(lead, metrics, drafters, keys.allows_api, config.max_body).app()
    feed = Feed(backs, lead.health, lambda: metrics.total.by_source, lambda: metrics.requests)
    metrics.listeners.append(feed.finished)
    app.router.routes.extend(Web(feed, keys.allows_api).routes())
    return LeadService(lead, app, feed)
