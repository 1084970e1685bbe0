"""One name per thing: no two classes in the package share a name (nested classes
included), so a class's name says which one it is wherever it turns up."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import duo

SRC = Path(duo.__file__).parent.parent


def class_modules() -> dict[str, list[str]]:
    """Each class name -> where it is defined (module:line)."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted((SRC / "duo").rglob("*.py")):
        module = ".".join(path.relative_to(SRC).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                found[node.name].append(f"{module}:{node.lineno}")
    return found


def test_no_two_classes_share_a_name() -> None:
    shared = {name: where for name, where in class_modules().items() if len(where) > 1}
    assert not shared, "classes sharing a name:\n" + "\n".join(
        f"  {name}: {', '.join(where)}" for name, where in sorted(shared.items())
    )


def test_the_package_has_classes() -> None:
    assert len(class_modules()) > 50  # the walk finds the source
