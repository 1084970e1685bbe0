"""An editor's limits on a completion (n_indent, t_max_predict_ms), as llama-server's."""

from __future__ import annotations

from duo.core.limits import Limits


def fed(limits: Limits, pieces: list[str]) -> str:
    out = ""
    for piece in pieces:
        out += limits.feed(piece)
        if limits.stopped:
            break
    return out


def test_a_line_indented_less_than_n_indent_ends_the_text_after_its_indentation() -> None:
    limits = Limits(n_indent=4)
    text = fed(limits, ["return x\n", "    y = 1\n", "  ", "z = 2\n", "never"])
    assert limits.stopped
    assert text == "return x\n    y = 1\n  "


def test_the_first_line_is_never_judged() -> None:
    limits = Limits(n_indent=4)
    assert fed(limits, ["x", " = 1", "\n    y"]) == "x = 1\n    y"
    assert not limits.stopped


def test_a_line_is_judged_once_it_has_more_than_indentation() -> None:
    limits = Limits(n_indent=4)
    assert fed(limits, ["a\n", "  "]) == "a\n  "
    assert not limits.stopped  # only indentation so far
    assert limits.feed("  b") == "  b"  # four spaces in all
    assert not limits.stopped


def test_past_the_time_limit_the_text_ends_at_its_next_newline() -> None:
    now = [0.0]
    limits = Limits(t_max_predict_ms=100, clock=lambda: now[0])
    assert limits.feed("a\n") == "a\n"  # within the limit
    now[0] = 0.2
    assert limits.feed("bc") == "bc"  # late, but no newline yet
    assert not limits.stopped
    assert limits.feed("d\ne") == "d\n"
    assert limits.stopped
    assert limits.feed("more") == ""


def test_no_limits_are_inactive() -> None:
    assert not Limits().active
    assert Limits(n_indent=1).active and Limits(t_max_predict_ms=1).active
