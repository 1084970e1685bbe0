"""`duo`'s command-line parser: bad usage is one line and a hint (exit 2), -v is taken
anywhere on the line, and every long flag takes its default from the environment."""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Mapping
from typing import Any, NoReturn

from duo.errors import UsageError


def usage_error(prog: str, message: str) -> str:
    """Bad usage, in one line, with where to look."""
    return f"{prog}: error: {message} (see {prog} --help)"


class Parser(argparse.ArgumentParser):
    """Bad usage is one line and a hint, exit 2 (argparse prints the whole usage block);
    -v/--verbose is taken anywhere on the line (each subcommand's parser knows it too)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, usage_error(self.prog, message) + "\n")

    def add_subparsers(self, **kwargs: Any) -> Any:
        sub = super().add_subparsers(**kwargs)
        add_parser = sub.add_parser

        def with_verbose(name: str, **kw: Any) -> argparse.ArgumentParser:
            child: argparse.ArgumentParser = add_parser(name, **kw)
            child.add_argument(
                "-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                help="debug logging",
            )  # fmt: skip
            return child

        sub.add_parser = with_verbose  # type: ignore[method-assign]
        return sub


ENV_PREFIX = "DUO_ARG_"  # DUO_ARG_CTX_SIZE=0 is -c 0 (as llama-server's LLAMA_ARG_*)
_TRUE, _FALSE = ("1", "true", "on", "yes"), ("0", "false", "off", "no")


def every_action(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    """The parser's arguments and those of its subcommands, at every depth."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from every_action(child)
        else:
            yield action


def env_defaults(parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> None:
    """Every long flag's default from $DUO_ARG_<FLAG> (--ctx-size: DUO_ARG_CTX_SIZE), in
    every subcommand; a flag on the command line wins. A value is read as the flag's would
    be (a switch takes 1/0, true/false, on/off, yes/no)."""
    for action in every_action(parser):
        flag = next((o for o in action.option_strings if o.startswith("--")), None)
        if flag is None or flag in ("--help", "--version"):
            continue
        name = ENV_PREFIX + flag[2:].upper().replace("-", "_")
        text = environ.get(name)
        if text is None:
            continue
        if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
            if text.lower() not in (*_TRUE, *_FALSE):
                raise UsageError(f"${name} is {text!r}: expected 1 or 0 (true/false, on/off)")
            on = text.lower() in _TRUE
            action.default = on if isinstance(action, argparse._StoreTrueAction) else not on
        elif type(action) is argparse._StoreAction and action.nargs is None:
            if action.choices is not None and text not in action.choices:
                known = ", ".join(map(str, action.choices))
                raise UsageError(f"${name} is {text!r}: expected one of {known}")
            action.default = text  # a string default is read by the flag's type, as given
