"""`duo lead`'s composition root: every part of the lead, built from its config in one place."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from starlette.applications import Starlette

from duo.auth import as_keys
from duo.channel.backs import Backs
from duo.channel.endpoint import DrafterEndpoint
from duo.core.text import Chunk
from duo.lead.api import Api, health_body
from duo.lead.engine.lead import Lead, LeadConfig
from duo.lead.openai.reasoning import Format
from duo.lead.web.feed import Feed
from duo.lead.web.page import Web
from duo.mailbox import Mailboxes
from duo.session.session import Session


@dataclass(frozen=True)
class LeadService:
    lead: Lead
    app: Starlette
    feed: Feed  # the web page's live events; close() it when the server is to stop

    def close(self) -> None:
        self.lead.close()


def build_lead(
    config: LeadConfig, show: Callable[[int, Chunk | str], None] | None = None
) -> LeadService:
    """Load the models and wire the engine, the drafter channel and the API together;
    `show` sees each slot's text as it is made."""
    backs = Backs()
    cache = config.cache_ram * 2**20 if config.cache_ram >= 0 else sys.maxsize  # -1: no limit
    session = Session(
        config.models, config.spec, remote=backs, slots=config.parallel, cache_bytes=cache
    )
    try:
        main = session.main
        main.cache_reuse = config.cache_reuse
        keys = as_keys(config.api_key)
        mail = Mailboxes()  # the engine's messages, to clients and backs alike
        drafters = DrafterEndpoint(
            backs,
            n_vocab=main.n_vocab,
            fingerprint=main.vocab.fingerprint,
            refusal=keys.drafter_refusal,
            mail=mail,
        )
        lead = Lead(
            session,
            backs,
            drafters.wire,
            mail,
            show,
            alias=config.alias,
            stretch=config.prompt_stretch,
            cache_bytes=cache,
        )
    except BaseException:
        session.close()
        raise
    metrics = lead.metrics
    feed = Feed(
        backs,
        lambda: health_body(lead.health()),
        lambda: metrics.total.by_source,
        lambda: metrics.requests,
    )
    metrics.listeners.append(feed.finished)
    web = Web(feed)
    reasoning = cast(Format, config.reasoning_format)
    api = Api(
        lead, metrics, drafters, keys.allows_api, config.max_body, reasoning, config.spm_infill
    )
    app = api.app(web.operations(), cors_origins=config.cors_origins)
    return LeadService(lead, app, feed)
