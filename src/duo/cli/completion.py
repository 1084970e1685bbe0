"""`duo completion SHELL`: a completion script for bash, zsh or tcsh, made from duo's own
parser by shtab, so it knows every command, flag and choice of this release.

    duo completion bash > ~/.local/share/bash-completion/completions/duo
    duo completion zsh > "${fpath[1]}/_duo"
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from duo.cli.parser import every_action

SHELLS = ("bash", "zsh", "tcsh")
# flags that name files: completed as paths
FILES = {
    "model", "model_draft", "file", "prompts", "chat_template_file", "json", "plot", "bench",
    "api_key_file", "drafter_key_file", "ssl_key_file", "ssl_cert_file", "ca_file",
}  # fmt: skip


def add_completion_parser(sub: Any, build: Callable[[], argparse.ArgumentParser]) -> None:
    p = sub.add_parser("completion", help="print a shell completion script (bash, zsh, tcsh)")
    p.add_argument("shell", choices=SHELLS)
    p.set_defaults(func=lambda args: _print(build(), args.shell))


def _print(parser: argparse.ArgumentParser, shell: str) -> int:
    import shtab

    _mark_files(parser, shtab.FILE)
    print(shtab.complete(parser, shell=shell), end="")
    return 0


def _mark_files(parser: argparse.ArgumentParser, file: Any) -> None:
    for action in every_action(parser):
        if action.dest in FILES and action.option_strings:
            action.complete = file  # type: ignore[attr-defined]
