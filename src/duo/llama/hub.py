"""Models by name from the Hugging Face Hub, as llama-server's `-hf REPO[:QUANT]` takes
them: the repository's GGUF files are listed, the quantization asked for is picked
(Q4_K_M when none is named, else the first GGUF), and the file (every part of a split
GGUF) is downloaded through `huggingface_hub`, with its cache (~/.cache/huggingface, or
$HF_HOME), its progress bar, $HF_TOKEN and $HF_ENDPOINT (a mirror). A file in the cache
is not downloaded again; with the hub out of reach, the cache alone answers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from duo.errors import UsageError

DEFAULT_QUANT = "Q4_K_M"  # llama-server's pick when the tag names none
_REPO = re.compile(r"[\w.-]+/[\w.-]+")
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


@dataclass(frozen=True)
class Ref:
    repo: str
    quant: str | None  # as typed after the colon; None: the default


def parse_ref(text: str, flag: str) -> Ref:
    """`org/repo` or `org/repo:QUANT`."""
    repo, _, quant = text.partition(":")
    if not _REPO.fullmatch(repo) or (_ and not quant):
        raise UsageError(f"{flag} {text!r}: expected a repository like org/name or org/name:Q4_K_M")
    return Ref(repo, quant or None)


def choose(files: list[str], quant: str | None, what: str) -> list[str]:
    """The GGUF files to fetch: the first match of the quantization (every part, if split),
    multimodal projectors left out."""
    ggufs = sorted(f for f in files if f.lower().endswith(".gguf") and "mmproj" not in f.lower())
    if not ggufs:
        raise UsageError(f"{what}: the repository holds no GGUF file")
    wanted = (quant or DEFAULT_QUANT).lower()
    token = re.compile(rf"(?<![a-z0-9]){re.escape(wanted)}(?![a-z0-9]|_[a-z0-9])")  # not Q4_K_M
    matching = [f for f in ggufs if token.search(Path(f).name.lower())]
    if not matching:
        if quant is not None:
            have = ", ".join(sorted({_quant_of(f) for f in ggufs}))
            raise UsageError(f"{what}: no GGUF file for {quant} (the repository has: {have})")
        matching = ggufs  # no Q4_K_M: the first GGUF, as llama-server takes it
    first = matching[0]
    split = _SPLIT.search(first)
    if not split:
        return [first]
    stem = first[: split.start()]
    parts = [f for f in matching if f.startswith(stem) and _SPLIT.search(f)]
    if len(parts) != int(split[2]):
        raise UsageError(f"{what}: {Path(first).name} is split in {int(split[2])} parts, "
                         f"the repository has {len(parts)}")  # fmt: skip
    return parts


def _quant_of(name: str) -> str:
    stem = _SPLIT.sub("", Path(name).name)
    stem = re.sub(r"\.gguf$", "", stem, flags=re.IGNORECASE)
    return re.split(r"[-.]", stem)[-1] or stem


def fetch(text: str, flag: str, token: str | None = None) -> Path:
    """The local path of the model `-hf text` names, downloaded if the cache lacks it."""
    ref = parse_ref(text, flag)
    what = f"{flag} {text}"
    try:
        import huggingface_hub as hub
        from huggingface_hub import errors
    except ImportError:
        raise UsageError(
            f"{what}: models by name need huggingface_hub (pip install huggingface_hub)"
        ) from None
    api = hub.HfApi(token=token)
    try:
        info = api.model_info(ref.repo)
    except errors.RepositoryNotFoundError:
        raise UsageError(f"{what}: no such repository on {api.endpoint} "
                         "(a private one needs HF_TOKEN or -hft)") from None  # fmt: skip
    except errors.HfHubHTTPError as e:
        raise UsageError(f"{what}: {api.endpoint} answered {_status(e)}") from None
    except Exception as e:  # out of reach: what the cache holds answers
        cached = next((c for c in cached_repos() if c.repo == ref.repo), None)
        if cached is None:
            unreachable = f"cannot reach {api.endpoint} ({type(e).__name__})"
            hint = "and the cache has nothing of it (HF_ENDPOINT names a mirror)"
            raise UsageError(f"{what}: {unreachable}, {hint}") from None
        return cached.paths[choose(list(cached.paths), ref.quant, what)[0]]
    paths = []
    for name in choose([s.rfilename for s in info.siblings or []], ref.quant, what):
        try:
            path = hub.hf_hub_download(ref.repo, name, revision=info.sha, token=token)
        except Exception as e:
            raise UsageError(f"{what}: cannot download {name}: {type(e).__name__}: {e}") from None
        paths.append(Path(path))
    return paths[0]


def _status(e: Exception) -> str:
    response = getattr(e, "response", None)
    return f"HTTP {response.status_code}" if response is not None else type(e).__name__


@dataclass(frozen=True)
class CachedRepo:
    repo: str
    paths: dict[str, Path]  # a file's name in the repository: its path in the cache
    size: int  # bytes on disk


def cached_repos() -> list[CachedRepo]:
    """The model repositories in huggingface_hub's cache that hold a GGUF file."""
    try:
        from huggingface_hub import scan_cache_dir
    except ImportError:
        return []
    try:
        info = scan_cache_dir()
    except Exception:  # no cache yet
        return []
    out = []
    for repo in sorted(info.repos, key=lambda r: r.repo_id):
        paths = {
            str(f.file_path.relative_to(r.snapshot_path)): f.file_path
            for r in sorted(repo.revisions, key=lambda r: r.last_modified)  # newest wins
            for f in r.files
        }
        if repo.repo_type == "model" and any(n.lower().endswith(".gguf") for n in paths):
            out.append(CachedRepo(repo.repo_id, paths, repo.size_on_disk))
    return out
