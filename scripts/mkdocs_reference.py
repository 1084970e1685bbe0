"""MkDocs hook: the command and HTTP references, generated from the code at every build.

`reference/commands.md` is every `duo` subcommand's parser (`duo X --help` is the source);
`reference/http.md` is `duo lead`'s route table, the one that serves `/openapi.json`. Both
are made in memory (no file is written into docs/), so they cannot go stale.
"""

from __future__ import annotations

import argparse
from types import SimpleNamespace
from typing import Any

from mkdocs.structure.files import File, Files

from duo.cli.main import build_parser
from duo.lead.api import Api
from duo.lead.engine.lead import ModelInfo
from duo.lead.openapi import openapi_schema
from duo.lead.web.page import Web


def on_files(files: Files, config: Any) -> Files:
    for path, text in (
        ("reference/commands.md", commands_page()),
        ("reference/http.md", http_page()),
    ):
        files.append(File.generated(config, path, content=text))
    return files


# -- commands ------------------------------------------------------------------------


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def commands_page() -> str:
    parser = build_parser()
    lines = [
        "# Commands",
        "",
        "Generated from `duo`'s parsers at every build: what `duo COMMAND --help` prints.",
        "",
    ]
    for name, sub in subcommands(parser).items():
        lines += [f"## `duo {name}`", ""]
        if sub.description:
            lines += [sub.description.strip(), ""]
        lines += ["| flag | what it does | default |", "|---|---|---|"]
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            flags = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.dest}`"
            helped = (action.help or "").replace("%(default)s", str(action.default))
            helped = helped.replace("|", "\\|").replace("\n", " ")
            default = "" if action.default in (None, argparse.SUPPRESS) else f"`{action.default}`"
            lines.append(f"| {flags} | {helped} | {default} |")
        lines += ["", "```text", sub.format_help().rstrip(), "```", ""]
    return "\n".join(lines) + "\n"


# -- HTTP ----------------------------------------------------------------------------


def routes() -> dict[str, Any]:
    """The lead's OpenAPI document, with the web page's routes: made from the route
    table, as the lead makes /openapi.json (no model loaded: the table needs none)."""
    lead = SimpleNamespace(info=ModelInfo("MODEL", 4096, 0), longest_token_bytes=lambda: 16)
    api = Api(lead, None, None, lambda key: True, 1 << 20)  # type: ignore[arg-type]
    return openapi_schema([*api.operations(), *Web(None).operations()])  # type: ignore[arg-type]


def http_page() -> str:
    doc = routes()
    lines = [
        "# HTTP API",
        "",
        "Generated from `duo lead`'s route table at every build, as `GET /openapi.json` is.",
        "",
        "| method | path | what it is |",
        "|---|---|---|",
    ]
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            lines.append(f"| {method.upper()} | `{path}` | {op.get('summary', '')} |")
    lines.append("")
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            lines += [f"## {method.upper()} `{path}`", "", op.get("summary", ""), ""]
            body = op.get("requestBody", {}).get("content", {})
            for media, content in body.items():
                lines.append(f"- request: `{media}` {_schema_name(content.get('schema', {}))}")
            for status, answer in op.get("responses", {}).items():
                lines.append(f"- {status}: {answer.get('description', '')}")
            lines.append("")
    return "\n".join(lines) + "\n"


def _schema_name(schema: dict[str, Any]) -> str:
    ref = schema.get("$ref", "")
    return ref.rsplit("/", 1)[-1] if ref else ""
