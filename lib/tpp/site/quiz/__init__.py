"""Check-yourself questions: one source for the site's self-checks and the graded quiz.

Each :class:`Question` belongs to a chapter and has options, exactly one of them correct, each
with an explanation that names the section to reread. ``graded=True`` marks the questions of the
graded notebook ``solutions/ex17_quiz.ipynb``: they are **held out of the page** (the site shows
only ``graded=False`` questions), so the public self-check never hands out the graded key.

Numbers in the questions are computed here from ``tpp`` (ring factors, bubble fractions, ZeRO
model states, hardware presets), so when the library changes the next build changes the quiz.
The serving chapter's six page questions follow the serving lesson's "Check yourself" (seed 2),
written in the course's words.

The package: :mod:`.question` (the data model), one bank per part of the book
(:mod:`.tensor`, :mod:`.pipeline`, :mod:`.scale_out`, :mod:`.serving`) put together by
:mod:`.bank`, and :mod:`.render` (the page's markup, the graded master's cells).
"""

from __future__ import annotations

from .bank import questions
from .question import LETTERS, Option, Question
from .render import (
    MASTER_INTRO,
    _inline,  # noqa: F401  (tests/test_quiz.py checks the inline markup)
    chapters,
    correct_letter,
    graded_questions,
    letters,
    page_questions,
    question_markdown,
    render_html,
    sync_master,
)

__all__ = ["Option", "Question", "questions", "page_questions", "graded_questions",
           "chapters", "letters", "correct_letter", "question_markdown", "render_html",
           "sync_master",
           "LETTERS", "MASTER_INTRO"]
