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
    -v/--verbose is taken anywhere on the line (each subcommand's parser knows it too);
    the $DUO_ARG_* values given to its flags (env_defaults) are checked before its command
    line is read."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.env_values: dict[argparse.Action, tuple[str, str]] = {}  # (variable, value)

    def error(self, message: str) -> NoReturn:
        self.exit(2, usage_error(self.prog, message) + "\n")

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        # A subcommand's parser is called here too, with the rest of the line.
        for action, (name, text) in self.env_values.items():
            problem = env_problem(action, name, text)
            if problem:
                self.error(problem)
        return super().parse_known_args(args, namespace)

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
    for _, action in _owned_actions(parser):
        yield action


def _owned_actions(
    parser: argparse.ArgumentParser,
) -> Iterator[tuple[argparse.ArgumentParser, argparse.Action]]:
    """Each argument of the parser and of its subcommands, with the parser it belongs to."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from _owned_actions(child)
        else:
            yield parser, action


def _is_switch(action: argparse.Action) -> bool:
    return isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction)


def env_defaults(parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> None:
    """Every long flag's default from $DUO_ARG_<FLAG> (--ctx-size: DUO_ARG_CTX_SIZE), in
    every subcommand; a flag on the command line wins. A value is read as the flag's would
    be (a switch takes 1/0, true/false, on/off, yes/no), and checked when its command runs
    even where the flag on the line overrides it, as llama-server applies LLAMA_ARG_*
    before its command line: a bad value is refused in one line naming the variable."""
    for owner, action in _owned_actions(parser):
        flag = next((o for o in action.option_strings if o.startswith("--")), None)
        if flag is None or flag in ("--help", "--version"):
            continue
        name = ENV_PREFIX + flag[2:].upper().replace("-", "_")
        text = environ.get(name)
        if text is None:
            continue
        switch = _is_switch(action)
        if not switch and not (type(action) is argparse._StoreAction and action.nargs is None):
            continue  # not taken from the environment
        if isinstance(owner, Parser):
            owner.env_values[action] = (name, text)
        elif problem := env_problem(action, name, text):  # a parser that checks nothing
            raise UsageError(problem)
        if switch:
            if text.lower() in (*_TRUE, *_FALSE):
                on = text.lower() in _TRUE
                action.default = on if isinstance(action, argparse._StoreTrueAction) else not on
        else:
            action.default = text  # a string default is read by the flag's type, as given


def env_problem(action: argparse.Action, name: str, text: str) -> str | None:
    """What is wrong with $name=text as the value of the action's flag, or None."""
    if _is_switch(action):
        if text.lower() not in (*_TRUE, *_FALSE):
            return f"${name} is {text!r}: expected 1 or 0 (true/false, on/off)"
        return None
    value: object = text
    if callable(action.type):
        try:
            value = action.type(text)
        except argparse.ArgumentTypeError as e:
            return f"${name}: {e}"
        except (TypeError, ValueError):
            kind = getattr(action.type, "__name__", repr(action.type))
            return f"${name} is {text!r}: not a valid {kind}"
    if action.choices is not None and value not in action.choices:
        known = ", ".join(map(str, action.choices))
        return f"${name} is {text!r}: expected one of {known}"
    return None
