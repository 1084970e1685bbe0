"""The documentation site builds (`mkdocs build --strict`, offline), and its generated
references hold every `duo` command and flag and every route of `duo lead`."""

from __future__ import annotations

import argparse
import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from duo.cli.main import build_parser

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from mkdocs_reference import routes, subcommands  # noqa: E402


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    r = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return out


def page(site: Path, name: str) -> str:
    return html.unescape((site / "reference" / name / "index.html").read_text())


def test_every_command_and_flag_is_in_the_command_reference(site: Path) -> None:
    text = page(site, "commands")
    for name, sub in subcommands(build_parser()).items():
        assert f"duo {name}" in text, name
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            for flag in action.option_strings:
                assert flag in text, f"duo {name} {flag}"


def test_every_route_is_in_the_http_reference(site: Path) -> None:
    text = page(site, "http")
    paths = routes()["paths"]
    assert {"/v1/chat/completions", "/v1/messages", "/infill", "/v1/drafter"} <= set(paths)
    for path, methods in paths.items():
        for method in methods:
            assert f"{method.upper()} {path}" in text, (method, path)


GENERATED = {"docs/reference/commands.md", "docs/reference/http.md"}  # made at build


def test_the_readme_fits_a_few_screens_and_its_links_resolve(site: Path) -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert len(links) >= 20
    for link in links:
        if "://" in link:
            continue
        assert (ROOT / link).exists() or link in GENERATED, link
        if link in GENERATED:  # a page of the site
            assert (site / link.removeprefix("docs/").removesuffix(".md") / "index.html").exists()
