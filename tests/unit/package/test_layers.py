"""The package's imports run downward: each layer imports only the layers below it, and
no module imports a module that imports it back (TYPE_CHECKING imports count too)."""

from __future__ import annotations

import ast
from pathlib import Path

import duo

SRC = Path(duo.__file__).parent.parent

# Lowest first. Packages of one layer do not import each other.
LAYERS = (
    ("errors",),
    ("net", "auth", "mailbox", "busy", "sse"),
    ("core",),  # the algorithm: pure functions and the engine, no I/O
    ("llama",),  # the llama.cpp adapter
    ("drafting",),  # drafters in this process
    ("channel",),  # the drafter channel
    ("session",),  # models + draft sources + policy, for a lead, the CLI or the bench
    ("lead", "bench"),  # the server, the measuring tools
    ("supervisor",),  # the server's rpc supervisor: it answers in the lead's shapes
    ("cli",),
    ("__main__",),
)

# Inside duo.lead, lowest first; the same rules. The engine returns its own objects, never
# HTTP shapes (protocol); the API's parts (openai, verifier, web) meet only in the app.
LEAD_LAYERS = (
    ("schema_refs", "body", "protocol", "engine"),  # request bodies, wire types, the engine
    ("tools", "format"),  # tool calls and their grammars; error bodies and SSE
    ("routes",),  # the route table, and the Starlette routes made from it
    ("openapi", "openai", "verifier", "web"),  # the document; the API's parts
    # llama.cpp's native routes, Anthropic's Messages API and OpenAI's Responses API, on the
    # OpenAI part's requests, prepare step and delivery
    ("native", "anthropic", "responses"),
    ("api",),  # the app: the parts' operations in one table
    ("build",),  # the composition root
)

# Inside duo.bench, lowest first; the same rules. The simulator reads what duo bench
# measures but never runs it; replay needs neither.
BENCH_LAYERS = (
    ("variants", "net"),  # the names of the modes' variants; network emulation
    ("sim",),  # the simulator, its traces, device profiles and projections
    ("harness", "replay"),  # duo bench itself; a workload's answers through the policy
)


def modules() -> dict[str, Path]:
    found = {}
    for path in (SRC / "duo").rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Each module's imports of other duo modules (a name imported from a package counts as
    its module where it is one)."""

    def resolve(name: str) -> str:
        while name not in mods:
            name = name.rpartition(".")[0]
        return name

    graph = {}
    for name, path in mods.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                deps |= {resolve(a.name) for a in node.names if a.name.startswith("duo.")}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "duo":
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    deps.add(full if full in mods else resolve(str(node.module)))
        graph[name] = deps - {name, "duo"}
    return graph


def package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def part(package: str, module: str) -> str | None:
    """The subpackage or module of duo.PACKAGE a module is in (None: outside it)."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == package else None


def lead_part(module: str) -> str | None:
    return part("lead", module)


def bench_part(module: str) -> str | None:
    return part("bench", module)


def test_every_package_has_a_layer() -> None:
    placed = {p for layer in LAYERS for p in layer}
    assert {package(m) for m in modules()} - {"duo"} <= placed


def test_imports_run_downward() -> None:
    level = {p: i for i, layer in enumerate(LAYERS) for p in layer}
    upward = sorted(
        f"{m} imports {d}"
        for m, deps in imports(modules()).items()
        for d in deps
        if package(m) != package(d) and level[package(d)] >= level[package(m)]
    )
    assert not upward


def test_no_module_imports_one_that_imports_it_back() -> None:
    graph = imports(modules())

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            m = todo.pop()
            if m == goal:
                return True
            if m not in seen:
                seen.add(m)
                todo += graph.get(m, ())
        return False

    circles = sorted(f"{m} <-> {d}" for m, deps in graph.items() for d in deps if reaches(d, m))
    assert not circles


def test_every_part_of_the_lead_has_a_layer() -> None:
    placed = {p for layer in LEAD_LAYERS for p in layer}
    assert {lead_part(m) for m in modules()} - {None} == placed


def test_imports_inside_the_lead_run_downward() -> None:
    level = {p: i for i, layer in enumerate(LEAD_LAYERS) for p in layer}
    upward = sorted(
        f"{m} imports {d}"
        for m, deps in imports(modules()).items()
        for d in deps
        if (a := lead_part(m)) and (b := lead_part(d)) and a != b and level[b] >= level[a]
    )
    assert not upward


def test_every_part_of_the_bench_has_a_layer() -> None:
    placed = {p for layer in BENCH_LAYERS for p in layer}
    assert {bench_part(m) for m in modules()} - {None} == placed


def test_imports_inside_the_bench_run_downward() -> None:
    level = {p: i for i, layer in enumerate(BENCH_LAYERS) for p in layer}
    upward = sorted(
        f"{m} imports {d}"
        for m, deps in imports(modules()).items()
        for d in deps
        if (a := bench_part(m)) and (b := bench_part(d)) and a != b and level[b] >= level[a]
    )
    assert not upward
