"""A reasoning model's thoughts apart from its answer, as llama-server's
`--reasoning-format` gives them.

A reply that starts with `<think>...</think>` (DeepSeek-R1, Qwen3, SmolLM3, QwQ and other
models that think first) has the text inside the tags in `reasoning_content` and the rest,
without the whitespace after the closing tag, in `content`. A chat template whose
generation prompt itself opens the tags starts the reply inside them. A reply that ends
before the closing tag is all thoughts. A reply that does not start with the tags is all
answer, exactly as generated.

    deepseek, auto   thoughts in `reasoning_content`, the answer in `content` (default)
    deepseek-legacy  `reasoning_content` too, and `content` the whole text, tags and all
    none             no parsing: `content` the whole text

Only the reply's shape changes: the tokens generated are the same in every format.
"""

from __future__ import annotations

from typing import Literal

from duo.core.stops import tail_of

OPEN, CLOSE = "<think>", "</think>"
FORMATS = ("auto", "deepseek", "deepseek-legacy", "none")
Format = Literal["auto", "deepseek", "deepseek-legacy", "none"]


def opened_by(prompt: str) -> bool:
    """Whether the prompt opens the thoughts (a generation prompt that ends in <think>)."""
    return prompt.rstrip().endswith(OPEN)


class Thoughts:
    """Split a reply while it streams: `feed` returns the (thoughts, answer) text that can
    go out now, `finish` the rest. Text that may still be a tag is held back until it is
    whole or cannot be one; joined, the pieces are what `split` gives."""

    def __init__(self, opened: bool = False) -> None:
        self.state = "inside" if opened else "before"
        self.pending = ""

    def feed(self, piece: str) -> tuple[str, str]:
        self.pending += piece
        thoughts = answer = ""
        while True:
            text = self.pending
            if self.state == "before":  # the reply may yet open with the tag
                start = text.lstrip()
                if start.startswith(OPEN):
                    self.pending, self.state = start[len(OPEN) :], "inside"
                elif OPEN.startswith(start):  # whitespace, or the tag's beginning
                    return thoughts, answer
                else:
                    self.state = "after"
            elif self.state == "inside":
                at = text.find(CLOSE)
                if at < 0:  # hold back what may be the closing tag's beginning
                    keep = tail_of(text, CLOSE)
                    thoughts += text[: len(text) - keep]
                    self.pending = text[len(text) - keep :]
                    return thoughts, answer
                thoughts += text[:at]
                self.pending, self.state = text[at + len(CLOSE) :], "closed"
            elif self.state == "closed":  # the whitespace between the tag and the answer
                start = text.lstrip()
                if not start:
                    self.pending = ""
                    return thoughts, answer
                self.pending, self.state = start, "after"
            else:
                self.pending = ""
                return thoughts, answer + text

    def finish(self) -> tuple[str, str]:
        rest, self.pending = self.pending, ""
        return (rest, "") if self.state == "inside" else ("", rest)


def split(text: str, opened: bool = False) -> tuple[str | None, str]:
    """(thoughts, answer) of a whole reply; thoughts None where there were no tags."""
    thoughts = Thoughts(opened)
    fed, answer = thoughts.feed(text)
    rest, answer_rest = thoughts.finish()
    had_tags = opened or thoughts.state in ("inside", "closed") or text.lstrip().startswith(OPEN)
    return (fed + rest if had_tags else None), answer + answer_rest
