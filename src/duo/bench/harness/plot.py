"""The benchmark report as a picture: tok/s per mode (with spread), and acceptance by
draft position; or, for a run across links of several round trips (--rtt), tok/s against
the round trip, one line per mode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from duo.bench.harness.report import Report
from duo.bench.variants import parse_variant
from duo.errors import UsageError


def plot(report: Report, out: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install 'duo[bench]'") from None

    fig, (speed, accept) = plt.subplots(1, 2, figsize=(11, 4.2), width_ratios=[3, 2])
    names = [m.mode for m in report.modes]
    medians = [m.tokens_per_second for m in report.modes]
    lows = [m.tokens_per_second - min(m.tokens_per_second_runs) for m in report.modes]
    highs = [max(m.tokens_per_second_runs) - m.tokens_per_second for m in report.modes]
    colors = ["#8c8c8c" if n.startswith("target") else "#3b7dd8" for n in names]
    speed.bar(names, medians, yerr=[lows, highs], capsize=4, color=colors)
    if report.ceiling_tokens_per_second:
        speed.axhline(
            report.ceiling_tokens_per_second,
            ls="--",
            color="#d8703b",
            label="ceiling: zero-cost drafter",
        )
        speed.legend(loc="upper left")
    for x, y in enumerate(medians):
        speed.annotate(
            f"{y:.1f}", (x, y), ha="center", va="bottom", xytext=(0, 3), textcoords="offset points"
        )
    top = max(
        [
            *(m.tokens_per_second + h for m, h in zip(report.modes, highs, strict=True)),
            report.ceiling_tokens_per_second or 0.0,
        ]
    )
    speed.set_ylim(0, top * 1.25)  # headroom for the labels and the legend
    speed.set_ylabel("decode tokens / s (median, min-max)")
    speed.set_title("speed by mode")
    speed.tick_params(axis="x", labelrotation=30)
    for label in speed.get_xticklabels():
        label.set_horizontalalignment("right")

    if len({m.rtt_ms for m in report.modes if m.rtt_ms is not None}) > 1:
        _by_round_trip(accept, report)
    else:
        _by_position(accept, report)
    fig.suptitle(
        f"{Path(report.settings['main']).name} + {Path(str(report.settings['draft'])).name}"
        f", {report.settings['n']} tokens x {report.settings['prompts']} prompts",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def _by_round_trip(ax: Any, report: Report) -> None:
    """tok/s against the link's round trip, a line per mode across the link; the modes
    that cross no link as level lines."""
    lines: dict[str, list[tuple[float, float]]] = {}
    for m in report.modes:
        if m.rtt_ms is None:
            ax.axhline(m.tokens_per_second, ls=":", color="#8c8c8c")
            ax.annotate(m.mode, (0, m.tokens_per_second), xytext=(2, 2),
                        textcoords="offset points", fontsize=8, color="#555555")  # fmt: skip
        else:
            lines.setdefault(parse_variant(m.mode)[0], []).append((m.rtt_ms, m.tokens_per_second))
    for mode, points in lines.items():
        xs, ys = zip(*sorted(points), strict=True)
        ax.plot(xs, ys, marker="o", label=mode)
    jitter = report.settings.get("jitter_ms") or 0
    ax.set_xlabel(f"round trip, ms (jitter ±{jitter:g} ms each way)")
    ax.set_ylabel("decode tokens / s")
    ax.set_ylim(0, None)
    ax.set_title(f"across a link ({report.settings.get('link', 'loopback')})")
    ax.legend()


def _by_position(accept: Any, report: Report) -> None:
    for m in report.modes:
        if m.accepted_at:
            positions = range(1, len(m.accepted_at) + 1)
            accept.plot(positions, m.accepted_at, marker="o", label=m.mode)
    accept.set_xlabel("draft position")
    accept.set_ylabel("accepted / verified")
    accept.set_ylim(0, 1)
    accept.set_title("acceptance by draft position")
    if accept.lines:
        accept.legend()
