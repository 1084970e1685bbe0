"""The `duo` command line. Importing this package loads nothing heavy: `run` first decides
whether to start again with huge pages (duo.llama.hugepages), then imports the commands."""

from __future__ import annotations

from collections.abc import Sequence

from duo.llama.hugepages import restart_with_hugepages


def main(argv: Sequence[str] | None = None) -> int:
    from duo.cli.main import main as _main

    return _main(argv)


def run() -> None:
    """The `duo` command (and `python -m duo`)."""
    restart_with_hugepages()
    from duo.cli.main import run as _run

    _run()


__all__ = ["main", "run"]
