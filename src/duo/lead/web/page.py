"""The lead's web page: a chat and a drafter dashboard, served from the package's files.

    GET /                 the page (static/index.html)
    GET /ui/NAME          its scripts and styles (static/NAME; nothing else is served)
    GET /v1/duo/events    the live events feed (duo.lead.web.feed), as server-sent events

The page and its assets carry a Content-Security-Policy that allows scripts, styles and
connections from the lead only, no inline script and no frames: model text is shown as
text by the page's own code, and the policy is the second wall. The page reaches the API
with the key the user gives it (kept in the browser's localStorage); the events feed takes
the API key as every endpoint does (its route checks it: duo.lead.routes).
"""

from __future__ import annotations

from importlib import resources

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from duo.lead.format import error_response
from duo.lead.routes import Answer, Operation
from duo.lead.web.feed import Feed

CSP = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    )
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}
TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".txt": "text/plain; charset=utf-8",
}
EVENTS_PATH = "/v1/duo/events"
MAX_NAME = 100  # characters of a static file's name


def asset(name: str) -> bytes | None:
    """A file of duo/lead/web/static by its plain name; None for anything else (a name too
    long for the file system, a NUL, a path)."""
    if not name or len(name) > MAX_NAME or "/" in name or "\\" in name or name.startswith("."):
        return None
    if not any(name.endswith(suffix) for suffix in TYPES):
        return None
    path = resources.files("duo.lead.web").joinpath("static", name)
    try:
        return path.read_bytes() if path.is_file() else None
    except (OSError, ValueError):  # ENAMETOOLONG, embedded NUL, ...: no such file
        return None


class Web:
    def __init__(self, feed: Feed) -> None:
        self.feed = feed

    def operations(self) -> list[Operation]:
        """The page's part of the route table (duo.lead.routes)."""
        return [
            Operation(
                "GET",
                "/",
                "The web page: a chat and a drafter dashboard",
                self.page,
                Answer(description="the page", media="text/html"),
                auth=False,
                errors=(),
            ),
            Operation(
                "GET",
                "/ui/{name}",
                "The web page's scripts, styles and icon",
                self.asset,
                Answer(
                    description="a file of the page (also text/css, image/svg+xml)",
                    media="text/javascript",
                ),
                auth=False,
                errors=("404",),
            ),
            Operation(
                "GET",
                EVENTS_PATH,
                "The web page's live events: drafters, requests, acceptance",
                self.events,
                Answer(description="server-sent events", media="text/event-stream"),
                errors=("401",),
            ),
        ]

    async def page(self, request: Request) -> Response:
        return self._file("index.html")

    async def asset(self, request: Request) -> Response:
        return self._file(request.path_params["name"])

    async def events(self, request: Request) -> Response:
        return StreamingResponse(
            self.feed.stream(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    def _file(self, name: str) -> Response:
        data = asset(name)
        if data is None:
            return error_response(404, "Not Found", kind="not_found_error")
        kind = TYPES[name[name.rfind(".") :]]
        return Response(data, media_type=kind, headers=SECURITY_HEADERS)
