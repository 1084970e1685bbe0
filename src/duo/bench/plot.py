"""The benchmark report as a picture: tok/s per mode (with spread), acceptance by position."""

from __future__ import annotations

from pathlib import Path

from duo.bench.report import Report
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
    fig.suptitle(
        f"{Path(report.settings['main']).name} + {Path(str(report.settings['draft'])).name}"
        f", {report.settings['n']} tokens x {report.settings['prompts']} prompts",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
