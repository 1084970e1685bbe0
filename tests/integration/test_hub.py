"""Models by name (-hf, -hfd) from a local stand-in for the Hugging Face Hub: listed,
picked by quantization, downloaded once into huggingface_hub's cache, loaded as by path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Cluster, duo, free_port, health, wait_until
from .fakehub import FakeHub

pytestmark = pytest.mark.integration

REPO = "duo-test/SmolLM2-135M-Instruct-GGUF"
PROMPT = ["-p", "The three primary colors are", "-n", "12", "--temp", "0", "--color", "never"]


@pytest.fixture
def hub(
    pair: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FakeHub]:
    main, draft = pair
    fake = FakeHub(
        {REPO: {"README.md": main.with_suffix(".gguf.json"), main.name: main, draft.name: draft}}
    )
    monkeypatch.setenv("HF_ENDPOINT", fake.url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    yield fake
    fake.close()


def test_generate_by_name_equals_by_path_and_works_from_the_cache(
    hub: FakeHub, pair: tuple[Path, Path]
) -> None:
    main, draft = pair
    by_path = duo("generate", "-m", str(main), "-md", str(draft), *PROMPT)
    by_name = duo("generate", "-hf", f"{REPO}:F16", "-hfd", f"{REPO}:Q3_K_M", *PROMPT)
    assert by_path.returncode == 0 and by_name.returncode == 0, by_name.stderr
    assert by_name.stdout == by_path.stdout and by_name.stdout.strip()
    assert hub.downloads == {main.name: 1, draft.name: 1}
    listed = duo("models", "list")
    assert REPO in listed.stdout and main.name in listed.stdout and draft.name in listed.stdout
    hub.close()  # the hub out of reach: the cache answers
    offline = duo("generate", "-hf", f"{REPO}:F16", "-hfd", f"{REPO}:Q3_K_M", *PROMPT)
    assert offline.returncode == 0, offline.stderr
    assert offline.stdout == by_path.stdout


def test_a_lead_by_name_downloads_once(
    hub: FakeHub, pair: tuple[Path, Path], tmp_path: Path
) -> None:
    main = pair[0]
    with Cluster(tmp_path) as cluster:
        for start in (1, 2):
            proc, url = cluster.lead("-hf", f"{REPO}:F16", "--spec-type", "none")
            assert health(url)["status"] == "ok"
            assert hub.downloads == {main.name: 1}, f"start {start} downloaded again"
            if start == 1:
                assert main.name in proc.output(), "no progress shown for the download"
            proc.stop()
            wait_until(lambda p=proc: not p.alive(), 30, "the lead stopped")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-hf", "duo-test/nothing-here"], "-hf duo-test/nothing-here: no such repository"),
        (["-hf", f"{REPO}:Q8_0"], "no GGUF file for Q8_0 (the repository has: f16, q3_k_m)"),
        (["-hf", "not-a-repo"], "expected a repository like org/name"),
        (["-hf", REPO, "-m", "x.gguf"], "give -m or -hf, not both"),
    ],
)
def test_bad_names_get_one_line(hub: FakeHub, args: list[str], message: str) -> None:
    r = duo("generate", *args, "-p", "hi", "-n", "1")
    assert r.returncode == 2, r.stderr
    assert message in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not hub.downloads


def test_an_unreachable_hub_with_nothing_cached_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    r = duo("lead", "-hf", f"{REPO}:F16", "--port", str(free_port()))
    assert r.returncode == 2, r.stderr
    assert "cannot reach" in r.stderr and "the cache has nothing of it" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
