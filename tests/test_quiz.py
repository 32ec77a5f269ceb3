"""Check-yourself questions: the source (tpp.site.quiz), the page's markup, the page in Chromium,
and the graded quiz (solutions/ex17_quiz.ipynb) that must not show its key.

The page test builds a tiny Sphinx project with the course's extension (no book build) and
drives it from ``file://`` in Debian's chromium with every non-file request refused. It skips
without chromium or playwright locally; TPP_REQUIRE_BROWSER=1 turns the skip into a failure.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
from fractions import Fraction
from html.parser import HTMLParser
from pathlib import Path

import pytest
from tpp.site import quiz

ROOT = Path(__file__).resolve().parents[1]
MASTER = ROOT / "solutions" / "ex17_quiz.ipynb"
CHAPTERS = sorted(p.stem for p in (ROOT / "chapters").glob("[0-9][0-9]*_*.ipynb"))


# ------------------------------------------------------------------------------ the source
@pytest.mark.parametrize("q", quiz.questions(), ids=lambda q: q.id)
def test_each_question_has_one_correct_option_and_every_option_an_explanation(q):
    assert sum(o.correct for o in q.options) == 1
    assert 2 <= len(q.options) <= 4
    assert len({o.text for o in q.options}) == len(q.options), "two options read the same"
    for o in q.options:
        assert o.explanation.strip()
        # the explanation names a chapter and a section to reread
        assert re.search(r"[Cc]hapter \d\db?, '[^']+'", o.explanation), o.explanation
        assert o.explanation.startswith("Right.") == o.correct, o.explanation


def test_a_question_with_two_right_options_is_rejected():
    with pytest.raises(ValueError, match="exactly one"):
        quiz.Question("x", "01_collectives", "?", (quiz.Option("a", True, "why"),
                                                    quiz.Option("b", True, "why")))
    with pytest.raises(ValueError, match="explanation"):
        quiz.Question("x", "01_collectives", "?", (quiz.Option("a", True, "why"),
                                                    quiz.Option("b", False, " ")))


def test_every_chapter_has_two_to_four_page_questions_and_17_has_six():
    assert sorted(quiz.chapters()) == CHAPTERS
    for ch in CHAPTERS:
        n = len(quiz.page_questions(ch))
        assert (n == 6) if ch == "17_serving" else (2 <= n <= 4), (ch, n)
    with pytest.raises(ValueError, match="use one of"):
        quiz.page_questions("99_nothing")


def test_numbers_in_questions_follow_the_chapters_formulas():
    """Recomputed here by hand from the formulas the chapters state (not from tpp.site.quiz)."""
    by_id = {q.id: q for q in quiz.questions()}
    right = {k: next(o.text for o in q.options if o.correct) for k, q in by_id.items()}
    assert right["c01-ring"].startswith("7/4 V")                     # 2(N-1)/N at N = 8
    assert right["c07-bubble"].startswith(f"{100 * 7 / 39:.1f} %")   # (P-1)/(M+P-1), 8, 32
    assert right["c09-bubble"].startswith(f"{100 * 7 / (4 * 32 + 7):.1f} %")
    assert right["c13-z3"].startswith(f"{16 * 7.5e9 / 64 / 1e9:.3g} GB")   # 16 Psi / N
    assert right["g4"] == str(Fraction(1) - Fraction(2, 4))                 # 1 - m/p


# ------------------------------------------------------------------------------ the graded quiz
def _cells():
    return json.loads(MASTER.read_text())["cells"]


def test_graded_questions_are_held_out_of_every_page():
    page = "".join(quiz.render_html(ch) for ch in quiz.chapters())
    graded = quiz.graded_questions()
    assert len(graded) == 6
    for q in graded:
        assert quiz._inline(q.stem) not in page, q.id
    assert not any(q.graded for ch in quiz.chapters() for q in quiz.page_questions(ch))


def test_the_master_is_generated_from_the_source_and_its_checks_hide_the_key():
    import nbformat

    nb = nbformat.read(MASTER, as_version=4)
    assert quiz.sync_master(nb) is False, "run: python -m tpp.site.quiz (master out of date)"
    cells = _cells()
    md = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    answers = ["".join(c["source"]) for c in cells if "answer" in c["metadata"].get("tags", [])]
    checks = ["".join(c["source"]) for c in cells if "check" in c["metadata"].get("tags", [])]
    graded = quiz.graded_questions()
    assert len(answers) == len(checks) == len(graded)
    for n, q in enumerate(graded, 1):
        assert quiz.question_markdown(q, n) in md
        assert f'answer_q{n} = "{quiz.correct_letter(q)}"' in answers[n - 1]
    for src in checks:
        assert "Right" not in src and "_why" not in src
        # the only letters a check names are all of them, in order: no key
        for letters in re.findall(r'"([A-H]+)"', src):
            assert letters == quiz.LETTERS[: len(letters)], src
        assert not re.search(r"==\s*['\"][A-H]['\"]", src), src


def test_the_exercise_check_fails_on_a_blank_and_passes_any_valid_letter():
    from tpp.grading.checks import check_choice, check_defined

    with pytest.raises(AssertionError):
        check_defined({}, "answer_q1")
    with pytest.raises(AssertionError):
        check_choice("answer_q1", "Z", "ABCD")
    for letter in "ABCD":   # a wrong letter passes the public check: it reveals nothing
        check_choice("answer_q1", letter, "ABCD")


# ------------------------------------------------------------------------------ the markup
class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.stack: list[str] = []
        self.questions: list[dict] = []
        self.quizzes = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = a.get("class", "").split()
        if "tpp-quiz" in cls:
            self.quizzes += 1
        if "tpp-question" in cls:
            self.questions.append({"choices": [], "explanations": []})
        if "tpp-choice" in cls:
            assert tag == "button" and a.get("type") == "button"
            self.questions[-1]["choices"].append(a)
        if "tpp-explanation" in cls:
            self.questions[-1]["explanations"].append(a)


def _scratch() -> Path:
    """A fresh folder under ``_build/`` (git-ignored). Not pytest's /tmp basetemp: concurrent
    pytest runs of the same user prune it, and Debian's chromium may see a private /tmp."""
    (ROOT / "_build").mkdir(exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="quiz-test-", dir=ROOT / "_build"))


@pytest.fixture(scope="module")
def built():
    """A tiny Sphinx project holding chapter 17's and chapter 07's quiz directives."""
    from sphinx.cmd.build import build_main

    src = _scratch()
    (src / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / '_ext')!r})\n"
        "extensions = ['myst_parser', 'tpp_quiz']\nhtml_theme = 'basic'\n")
    (src / "index.rst").write_text(
        "Quiz\n====\n\n.. tpp-quiz:: 17_serving\n\nMore\n----\n\n.. tpp-quiz:: 07_gpipe\n"
        "\n.. toctree::\n\n   myst\n")
    # the chapters' own cell, as MyST Markdown
    cell = next("".join(c["source"]) for c in json.loads(
        (ROOT / "chapters" / "01_collectives.ipynb").read_text())["cells"]
        if "{tpp-quiz}" in "".join(c["source"]))
    (src / "myst.md").write_text("# MyST\n\n" + cell + "\n")
    out = src / "_out"
    assert build_main(["-q", "-b", "html", str(src), str(out)]) == 0
    yield out
    shutil.rmtree(src, ignore_errors=True)


def test_rendered_markup_has_each_question_and_an_explanation_per_option(built):
    page = (built / "index.html").read_text()
    p = _Collect()
    p.feed(page)
    expected = quiz.page_questions("17_serving") + quiz.page_questions("07_gpipe")
    assert p.quizzes == 2 and len(p.questions) == len(expected)
    for got, q in zip(p.questions, expected, strict=True):
        assert len(got["choices"]) == len(got["explanations"]) == len(q.options)
        assert [c["data-correct"] == "true" for c in got["choices"]] == [o.correct
                                                                         for o in q.options]
        ids = [e["id"] for e in got["explanations"]]
        assert [c["aria-controls"] for c in got["choices"]] == ids
        assert all("hidden" in e for e in got["explanations"])
    assert 'src="_static/quiz/tpp_quiz.js' in page
    assert (built / "_static" / "quiz" / "tpp_quiz.js").is_file()
    assert (built / "_static" / "quiz" / "tpp_quiz.css").is_file()
    assert "http" not in (built / "_static" / "quiz" / "tpp_quiz.js").read_text()
    myst = (built / "myst.html").read_text()
    assert myst.count('class="tpp-question"') == len(quiz.page_questions("01_collectives"))
    assert "{tpp-quiz}" not in myst


def test_an_unknown_chapter_fails_the_build_with_a_message():
    from sphinx.cmd.build import build_main

    tmp_path = _scratch()

    (tmp_path / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / '_ext')!r})\nextensions = ['tpp_quiz']\n")
    (tmp_path / "index.rst").write_text("Q\n=\n\n.. tpp-quiz:: 99_nothing\n")
    warn = tmp_path / "warn.txt"
    build_main(["-q", "-b", "html", "-w", str(warn), str(tmp_path), str(tmp_path / "o")])
    try:
        assert "no page questions for chapter '99_nothing'" in warn.read_text()
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def test_every_chapter_holds_its_quiz_directive_at_a_section_boundary():
    """Before the exercises when that cell opens a section, else the notebook's last cell."""
    for ch in CHAPTERS:
        cells = json.loads((ROOT / "chapters" / f"{ch}.ipynb").read_text())["cells"]
        src = ["".join(c["source"]) for c in cells]
        where = [i for i, s in enumerate(src) if f"```{{tpp-quiz}} {ch}" in s]
        assert len(where) == 1, ch
        i = where[0]
        assert src[i].startswith("## Check yourself"), ch
        ex = next((k for k, s in enumerate(src) if re.search(r"^## Exercises", s, re.M)), None)
        assert i == len(src) - 1 or (i + 1 == ex and src[ex].lstrip().startswith("#")), ch


# ------------------------------------------------------------------------------ in Chromium
def test_clicking_shows_explanations_and_keeps_the_score_offline_at_390px(built, browser):
    qs = quiz.page_questions("17_serving")
    context = browser.new_context(viewport={"width": 390, "height": 800})
    page = context.new_page()
    errors: list[str] = []
    remote: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    def route(r):
        if r.request.url.startswith("file:"):
            r.continue_()
        else:
            remote.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    try:
        page.goto((built / "index.html").as_uri(), wait_until="load")
        quiz_box = page.locator(".tpp-quiz").first
        score = quiz_box.locator(".tpp-score")
        assert score.inner_text().startswith(f"Score 0/{len(qs)}")

        def option(n: int, correct: bool):
            q = quiz_box.locator(".tpp-question").nth(n)
            i = next(k for k, o in enumerate(qs[n].options) if o.correct == correct)
            return q.locator(".tpp-choice").nth(i), q.locator(".tpp-explanation").nth(i), i

        wrong, wrong_ex, wi = option(0, False)
        assert not wrong_ex.is_visible()
        wrong.click()
        assert wrong_ex.is_visible()
        assert wrong_ex.inner_text() == qs[0].options[wi].explanation
        assert wrong.get_attribute("aria-expanded") == "true"
        assert score.inner_text().startswith(f"Score 0/{len(qs)} · answered 1")

        right, right_ex, _ = option(0, True)   # a second try shows but does not score
        right.click()
        assert right_ex.is_visible()
        assert score.inner_text().startswith(f"Score 0/{len(qs)} · answered 1")

        right, right_ex, ri = option(1, True)
        right.click()
        assert right_ex.inner_text() == qs[1].options[ri].explanation
        assert score.inner_text().startswith(f"Score 1/{len(qs)} · answered 2")

        right, right_ex, _ = option(2, True)   # by keyboard
        right.focus()
        page.keyboard.press("Enter")
        assert right_ex.is_visible()
        assert score.inner_text().startswith(f"Score 2/{len(qs)} · answered 3")
        # the other page's quiz keeps its own score
        assert page.locator(".tpp-quiz").nth(1).locator(".tpp-score-answered").inner_text() == "0"

        width = page.evaluate("() => document.documentElement.scrollWidth")
        assert width <= 390, f"sideways scroll at 390 px: {width}"
    finally:
        context.close()
    assert errors == [] and remote == []


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
