"""A check-yourself question and its options (:class:`Question`, :class:`Option`), and the
small helpers the question banks write them with."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

__all__ = ["LETTERS", "Option", "Question"]

LETTERS = "ABCDEFGH"


@dataclass(frozen=True)
class Option:
    """One choice: its text, whether it is the right one, and why (naming what to reread)."""

    text: str
    correct: bool
    explanation: str


@dataclass(frozen=True)
class Question:
    """A multiple-choice question of ``chapter`` (e.g. ``"07_gpipe"``)."""

    id: str
    chapter: str
    stem: str
    options: tuple[Option, ...]
    graded: bool = False

    def __post_init__(self) -> None:
        n_right = sum(o.correct for o in self.options)
        if n_right != 1:
            raise ValueError(f"question {self.id}: {n_right} correct options; mark exactly one")
        if not 2 <= len(self.options) <= len(LETTERS):
            raise ValueError(f"question {self.id}: give 2 to {len(LETTERS)} options")
        for o in self.options:
            if not o.explanation.strip():
                raise ValueError(f"question {self.id}: option {o.text!r} needs an explanation")


def _q(qid: str, chapter: str, stem: str, *opts: tuple[str, bool, str],
       graded: bool = False) -> Question:
    return Question(qid, chapter, stem, tuple(Option(*o) for o in opts), graded)


def _pct(x) -> str:
    return f"{100 * float(x):.1f} %"


def _frac(x: Fraction) -> str:
    return str(x) if x.denominator != 1 else str(x.numerator)


R, W = True, False   # right / wrong, for short option tuples
