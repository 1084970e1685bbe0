"""-hf and -hfd: models by name from the Hugging Face Hub (duo.llama.hub)."""

from __future__ import annotations

import argparse
from typing import Any

from duo.errors import UsageError
from duo.llama.hub import DEFAULT_QUANT, fetch


def add_hub_args(g: Any, *, draft: bool, model: str = "main model") -> None:
    """-hf (and -hfd): models by name from the Hugging Face Hub, as llama-server takes them."""
    g.add_argument(
        "-hf",
        "--hf-repo",
        metavar="REPO[:QUANT]",
        help=f"the {model} from the Hugging Face Hub, e.g. org/name-GGUF:Q8_0 (default quant "
        f"{DEFAULT_QUANT}, else the first GGUF); cached, $HF_ENDPOINT names a mirror",
    )
    if draft:
        g.add_argument(
            "-hfd", "--hf-repo-draft", metavar="REPO[:QUANT]", help="the draft model, likewise"
        )
    g.add_argument("-hft", "--hf-token", metavar="TOKEN", help="Hub token (default $HF_TOKEN)")


def hub_models(args: argparse.Namespace) -> None:
    """Turn -hfd and -hf into local paths for -md and -m (the draft first: it is smaller,
    and a wrong name shows sooner)."""
    for flag, ref_attr, path_attr, path_flag in (
        ("-hfd", "hf_repo_draft", "model_draft", "-md"),
        ("-hf", "hf_repo", "model", "-m"),
    ):
        ref = getattr(args, ref_attr, None)
        if ref is None:
            continue
        if getattr(args, path_attr, None) is not None:
            raise UsageError(f"give {path_flag} or {flag}, not both")
        setattr(args, path_attr, str(fetch(ref, flag, args.hf_token)))
