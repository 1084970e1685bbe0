"""Functions in the package stay short: at most LIMIT lines, not counting the lines of data
tables in them (a list, tuple, dict or set display of TABLE entries or more). Argparse
builders (add_*, *_parser) are long by nature and left out; no package is."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import duo

SRC = Path(duo.__file__).parent.parent
LIMIT = 60
TABLE = 5

Function = ast.FunctionDef | ast.AsyncFunctionDef


def functions(node: ast.AST, prefix: str) -> Iterator[tuple[str, Function]]:
    """Every function under node (methods and nested functions too), with its dotted name."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            yield prefix + child.name, child
            yield from functions(child, f"{prefix}{child.name}.")
        elif isinstance(child, ast.ClassDef):
            yield from functions(child, f"{prefix}{child.name}.")
        else:
            yield from functions(child, prefix)


def table_lines(function: Function) -> set[int]:
    """The lines of the data tables in a function."""
    lines: set[int] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            entries = len(node.elts)
        elif isinstance(node, ast.Dict):
            entries = len(node.keys)
        else:
            continue
        if entries >= TABLE and node.end_lineno is not None:
            lines.update(range(node.lineno, node.end_lineno + 1))
    return lines


def length(function: Function) -> int:
    assert function.end_lineno is not None
    lines = set(range(function.lineno, function.end_lineno + 1))
    return len(lines - table_lines(function))


def argparse_builder(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return last.startswith("add_") or last.endswith("_parser")


def long_functions() -> dict[str, int]:
    """Each function over LIMIT lines (argparse builders left out) -> its length."""
    found = {}
    for path in sorted((SRC / "duo").rglob("*.py")):
        module = ".".join(path.relative_to(SRC).with_suffix("").parts)
        for name, function in functions(ast.parse(path.read_text(), str(path)), ""):
            if argparse_builder(name):
                continue
            if (n := length(function)) > LIMIT:
                found[f"{module}.{name}"] = n
    return found


def test_functions_are_at_most_limit_lines() -> None:
    long = long_functions()
    assert not long, f"functions over {LIMIT} lines (split them):\n" + "\n".join(
        f"  {name}: {n}" for name, n in sorted(long.items())
    )


def test_a_data_table_is_not_counted() -> None:
    tree = ast.parse("def f():\n    rows = [\n" + "        1,\n" * 100 + "    ]\n    return rows\n")
    function = tree.body[0]
    assert isinstance(function, ast.FunctionDef)
    assert length(function) == 2


# The engine and the llama.cpp adapter, each module one idea.
SMALL_PACKAGES = ("duo/lead/engine", "duo/llama")
MODULE_LIMIT = 350


def test_the_engine_and_the_adapter_have_no_module_over_module_limit_lines() -> None:
    long = {
        str(path.relative_to(SRC)): n
        for package in SMALL_PACKAGES
        for path in sorted((SRC / package).glob("*.py"))
        if (n := len(path.read_text().splitlines())) > MODULE_LIMIT
    }
    assert not long, f"modules over {MODULE_LIMIT} lines (split them by idea): {long}"
