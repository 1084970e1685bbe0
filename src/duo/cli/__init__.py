"""The `duo` command line."""

from duo.cli.main import main, run

__all__ = ["main", "run"]
