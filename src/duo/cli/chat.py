"""`duo chat`: a terminal chat with a running lead, each answer streamed as it is generated.

Type a question at the prompt; `:new` starts a new conversation, `:quit` or Ctrl-D exits,
`:help` lists the commands (Ollama's `/bye`, `/clear` and `/?` work too).
Ctrl-C stops the answer being written. With piped stdin, lines are read without a prompt.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import httpx

from duo import auth
from duo.cli import auth_args
from duo.cli.values import positive
from duo.errors import ClientError, DuoError, exit_code
from duo.sse import json_events

DIM = "\x1b[2m"
RESET = "\x1b[0m"
TIMEOUT = httpx.Timeout(300.0, connect=10.0)  # reads may wait out a busy lead's queue


class History:
    """The conversation so far; a turn joins it only once its answer is complete."""

    def __init__(self, system: str | None = None) -> None:
        self.system = system
        self.turns: list[dict[str, str]] = []

    def messages(self, question: str) -> list[dict[str, str]]:
        """What to send to ask `question` next: system prompt, earlier turns, question."""
        system = [{"role": "system", "content": self.system}] if self.system else []
        return [*system, *self.turns, {"role": "user", "content": question}]

    def add(self, question: str, answer: str) -> None:
        self.turns += [
            {"role": "user", "content": question},
            {"role": "assistant", "content": answer},
        ]

    def reset(self) -> None:
        self.turns = []


def sse_events(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    """The JSON objects of an SSE stream's events, up to `data: [DONE]`."""
    try:
        for event in json_events(lines):
            if isinstance(event, dict):
                yield event
    except ValueError:
        raise ClientError("the lead sent a malformed event") from None


def error_text(body: object, fallback: str) -> str:
    """The message of an OpenAI-style error body, on one line."""
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    return " ".join(str(message).split()) if message else fallback


def stream_answer(
    lines: Iterable[str], write: Callable[[str], object]
) -> tuple[str, dict[str, Any]]:
    """Writes each delta of a chat stream as it comes; returns the text and the final chunk."""
    parts: list[str] = []
    final: dict[str, Any] = {}
    for event in sse_events(lines):
        if "error" in event:
            raise ClientError(error_text(event, "the lead failed to answer"))
        choice = (event.get("choices") or [{}])[0]
        text = (choice.get("delta") or {}).get("content") or ""
        if text:
            write(text)
            parts.append(text)
        if choice.get("finish_reason") is not None:
            final = event
    return "".join(parts), final


def format_stats(final: dict[str, Any]) -> str | None:
    """One line from the final chunk's `usage` and `timings`; None without timings."""
    t = final.get("timings")
    if not isinstance(t, dict):
        return None
    n = (final.get("usage") or {}).get("completion_tokens", t.get("predicted_n", 0))
    cut = (final.get("choices") or [{}])[0].get("finish_reason") == "length"
    return (
        f"[{n} tokens, {t.get('predicted_per_second', 0):.1f} tok/s, "
        f"drafted {t.get('draft_n', 0)}, accepted {t.get('draft_n_accepted', 0)}, "
        f"mean acceptance length {t.get('mean_acceptance_length', 0):.1f}"
        + (", cut at the token limit]" if cut else "]")
    )


def reason(e: httpx.HTTPError) -> str:
    """'connection refused' from '[Errno 111] Connection refused', and the like."""
    if isinstance(e, httpx.TimeoutException):
        return "timed out"
    text = re.sub(r"^\[Errno -?\d+\]\s*", "", str(e)).rstrip(".") or type(e).__name__
    return text[:1].lower() + text[1:]


def response_error(r: httpx.Response) -> ClientError:
    if r.status_code == 401:
        return ClientError("the lead refused the API key", fatal=True)
    try:
        body = json.loads(r.read())
    except ValueError:
        body = None
    return ClientError(error_text(body, f"HTTP {r.status_code} {r.reason_phrase}"))


def check(client: httpx.Client, url: str, ca_file: str | None) -> str:
    """Fails unless a lead answers at `url` and takes our API key; returns its model's name."""
    try:
        health = client.get("/health")
        models = client.get("/v1/models")  # /health needs no key; this does
    except httpx.HTTPError as e:
        if failure := auth.certificate_failure(e):
            raise ClientError(auth.certificate_problem(url, failure, ca_file)) from None
        raise ClientError(
            f"cannot reach the lead at {url} ({reason(e)}); start it with `duo lead`"
        ) from None
    if health.status_code != 200:
        raise ClientError(f"{url} answered /health with HTTP {health.status_code}; not a lead?")
    if models.status_code == 401:
        raise response_error(models)
    try:
        return str(health.json()["model"])
    except (ValueError, KeyError, TypeError):
        return "the model"


def ask(client: httpx.Client, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Streams one answer to stdout, ending its line however it ends; returns its text and
    final chunk."""
    wrote = False

    def write(text: str) -> None:
        nonlocal wrote
        wrote = True
        sys.stdout.write(text)
        sys.stdout.flush()

    try:
        with client.stream("POST", "/v1/chat/completions", json=body) as r:
            if r.status_code != 200:
                raise response_error(r)
            return stream_answer(r.iter_lines(), write)
    except httpx.HTTPError as e:
        raise ClientError(f"lost the lead ({reason(e)})") from None
    finally:
        if wrote:
            print(flush=True)


def note(text: str) -> None:
    """A dim line on stderr (plain when stderr is not a terminal)."""
    print(f"{DIM}{text}{RESET}" if sys.stderr.isatty() else text, file=sys.stderr, flush=True)


def cmd_chat(args: argparse.Namespace) -> int:
    tty = sys.stdin.isatty()
    if tty:
        with contextlib.suppress(ImportError):
            import readline  # noqa: F401  (line editing and history for input())
    try:
        key = auth_args.client_key(args)
        tls = auth.client_tls(args.ca_file, httpx.URL(args.url).scheme == "https")
    except DuoError as e:
        print(f"duo chat: {e}", file=sys.stderr)
        return exit_code(e)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    history = History(args.system)
    with httpx.Client(
        base_url=args.url, headers=headers, timeout=TIMEOUT, verify=tls or True
    ) as client:
        try:
            model = check(client, args.url, args.ca_file)
        except ClientError as e:
            print(f"duo chat: {e}", file=sys.stderr)
            return exit_code(e)
        if tty:
            note(f"chatting with {model} at {args.url}; :new starts over, :quit exits")
        while True:
            try:
                text = input("you> " if tty else "").strip()
            except (EOFError, KeyboardInterrupt):
                if tty:
                    print()
                return 0
            what = command(text)
            if what == "quit":
                return 0
            if what == "new":
                history.reset()
                if tty:
                    note("[new conversation]")
                continue
            if what in ("help", "unknown"):
                note(("" if what == "help" else f"unknown command {text}; ") + HELP)
                continue
            if not text:
                continue
            body: dict[str, Any] = {"messages": history.messages(text), "stream": True}
            if args.max_tokens is not None:
                body["max_tokens"] = args.max_tokens
            try:
                answer, final = ask(client, body)
            except KeyboardInterrupt:
                note("[interrupted]")
                continue
            except ClientError as e:
                print(f"duo chat: {e}", file=sys.stderr, flush=True)
                if e.fatal:
                    return exit_code(e)
                continue
            history.add(text, answer)
            stats = format_stats(final)
            if stats and not args.no_stats:
                note(stats)


COMMANDS = {
    **dict.fromkeys((":quit", ":exit", ":q", "/quit", "/exit", "/bye"), "quit"),
    **dict.fromkeys((":new", ":clear", "/new", "/clear"), "new"),
    **dict.fromkeys((":help", ":?", "/help", "/?"), "help"),
}
HELP = ":new starts a new conversation, :quit (or Ctrl-D) exits, :help shows this"


def command(text: str) -> str | None:
    """What a line asks of the chat itself ("quit", "new", "help", "unknown"), or None for
    a message to the model. A lone word starting with ':' or '/' is a command (the `/bye`
    of Ollama's prompt too); a message that starts so but goes on is sent as it is."""
    if text in COMMANDS:
        return COMMANDS[text]
    if text[:1] in (":", "/") and len(text) > 1 and " " not in text and "/" not in text[1:]:
        return "unknown"
    return None


def http_url(text: str) -> str:
    if "://" not in text:  # host:port, as duo back --lead takes it
        text = f"http://{text}"
    try:
        url = httpx.URL(text)
    except httpx.InvalidURL as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if url.scheme not in ("http", "https") or not url.host:
        raise argparse.ArgumentTypeError(f"expected an http:// or https:// URL, got {text!r}")
    return text.rstrip("/")


def add_chat_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    chat = sub.add_parser("chat", help="chat with a running lead in the terminal")
    chat.add_argument(
        "--url", type=http_url, default="http://127.0.0.1:5555", help="the lead's URL"
    )
    chat.add_argument("--system", metavar="TEXT", help="a system prompt")
    auth_args.add_key_args(chat, "the lead's API key")
    auth_args.add_ca_file_arg(chat)
    chat.add_argument(
        "-n", "--max-tokens", type=positive, metavar="N", help="most tokens per answer"
    )
    chat.add_argument("--no-stats", action="store_true", help="hide the per-answer stats line")
    chat.set_defaults(func=cmd_chat)
