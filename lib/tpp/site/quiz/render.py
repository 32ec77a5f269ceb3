"""What the questions become: the page's markup (:func:`render_html`, no kernel) and the graded
master's cells (:func:`sync_master`, ``python -m tpp.site.quiz``)."""

from __future__ import annotations

import html
import re

from .bank import questions
from .question import LETTERS, Question


def chapters() -> list[str]:
    """Chapters with page questions, in order."""
    return sorted({q.chapter for q in questions() if not q.graded})


def page_questions(chapter: str) -> list[Question]:
    """The questions the site shows for ``chapter`` (never a graded one)."""
    out = [q for q in questions() if q.chapter == chapter and not q.graded]
    if not out:
        raise ValueError(f"no page questions for chapter {chapter!r}: use one of "
                         f"{', '.join(chapters())}")
    return out


def graded_questions() -> list[Question]:
    """The graded quiz's questions (``solutions/ex17_quiz.ipynb``), held out of the page."""
    return [q for q in questions() if q.graded]


def letters(q: Question) -> str:
    return LETTERS[: len(q.options)]


def correct_letter(q: Question) -> str:
    return next(LETTERS[i] for i, o in enumerate(q.options) if o.correct)


def question_markdown(q: Question, number: int) -> str:
    """The graded notebook's Markdown for ``q``: stem and lettered options, no key."""
    lines = [f"## Question {number}", "", q.stem, ""]
    lines += [f"* **{LETTERS[i]}**: {o.text}" for i, o in enumerate(q.options)]
    lines += ["", f"Set `answer_q{number}` to one letter."]
    return "\n".join(lines)


MASTER_INTRO = (
    "# Exercise 17: check yourself\n\n"
    "Six multiple-choice questions on the serving chapter (`chapters/17_serving.ipynb`) and the\n"
    "tensor-parallel chapters, one on each topic of the serving lesson's \"Check yourself\". The\n"
    "chapter's page carries its own six questions with explanations to practise on; these are\n"
    "different ones. For each, set the variable to one letter and run the cell below it: "
    "it checks\n"
    "only that you gave a valid letter. The gradebook counts the letter you hand in, one "
    "point per\n"
    "question; your feedback after grading says which were right.")


def sync_master(nb) -> bool:
    """Write the graded questions into the master ``ex17_quiz`` (an nbformat notebook) in place.

    Cells are matched by id (``ex17q-NN``): question Markdown, answer (the key, inside the
    solution block) and a public check that accepts any valid letter. Returns whether anything
    changed. ``python -m tpp.site.quiz`` applies it to ``solutions/ex17_quiz.ipynb``.
    """
    cells = {c.id: c for c in nb.cells}
    new = {"ex17q-00": MASTER_INTRO}
    for n, q in enumerate(graded_questions(), 1):
        base = 2 + 4 * (n - 1)
        new[f"ex17q-{base:02d}"] = question_markdown(q, n)
        new[f"ex17q-{base + 1:02d}"] = (
            f'# BEGIN SOLUTION\nanswer_q{n} = "{correct_letter(q)}"\n# END SOLUTION')
        new[f"ex17q-{base + 2:02d}"] = (
            f'check_defined(globals(), "answer_q{n}")\n'
            f'check_choice("answer_q{n}", answer_q{n}, "{letters(q)}")\n'
            f'print("q{n}: a valid letter, recorded — the gradebook counts your final letter")')
    missing = sorted(set(new) - set(cells))
    if missing:
        raise ValueError(f"the master has no cells {missing}: add them (ids ex17q-NN)")
    changed = False
    for cid, text in new.items():
        if cells[cid].source != text:
            cells[cid].source, changed = text, True
    return changed


_CODE = re.compile(r"`([^`]+)`")


def _inline(text: str) -> str:
    return _CODE.sub(r"<code>\1</code>", html.escape(text, quote=False))


def render_html(chapter: str) -> str:
    """The page's markup: ``.tpp-quiz`` > ``.tpp-question`` > options with ``.tpp-explanation``.

    Works without a kernel: ``_static/quiz/tpp_quiz.js`` reveals an option's explanation on
    click (or Enter/Space) and keeps the running score in ``.tpp-score``.
    """
    qs = page_questions(chapter)
    out = [f'<section class="tpp-quiz" data-chapter="{html.escape(chapter)}" '
           f'aria-label="Check yourself">',
           f'<p class="tpp-score" aria-live="polite">Score <span class="tpp-score-right">0'
           f'</span>/<span class="tpp-score-total">{len(qs)}</span> · answered '
           f'<span class="tpp-score-answered">0</span></p>']
    for n, q in enumerate(qs, 1):
        qid = f"tpp-quiz-{html.escape(q.id)}"
        out.append(f'<fieldset class="tpp-question" id="{qid}">')
        out.append(f'<legend>Question {n} of {len(qs)}: {_inline(q.stem)}</legend>')
        for i, o in enumerate(q.options):
            eid = f"{qid}-{LETTERS[i].lower()}"
            out.append(
                f'<div class="tpp-option"><button type="button" class="tpp-choice" '
                f'data-correct="{str(o.correct).lower()}" aria-expanded="false" '
                f'aria-controls="{eid}"><span class="tpp-letter">{LETTERS[i]}</span> '
                f'{_inline(o.text)}</button>'
                f'<p class="tpp-explanation" id="{eid}" hidden>{_inline(o.explanation)}</p></div>')
        out.append("</fieldset>")
    out.append("</section>")
    return "\n".join(out)
