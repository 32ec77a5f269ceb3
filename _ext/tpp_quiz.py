"""Sphinx extension: the directive ``tpp-quiz`` renders a chapter's check-yourself questions.

In a chapter's Markdown cell::

    ```{tpp-quiz} 07_gpipe
    ```

emits the markup of :func:`tpp.site.quiz.render_html` (``.tpp-quiz`` > ``.tpp-question`` > options
with ``.tpp-explanation``), answered in the page by ``_static/quiz/tpp_quiz.js`` without a
kernel or network. Questions come from ``tpp.site.quiz`` at every build; graded questions are never
shown. Other builders (LaTeX) get the stems and options as text.
"""

from __future__ import annotations

from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import Directive

STATIC = Path(__file__).resolve().parents[1] / "_static"


class TppQuiz(Directive):
    required_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        from tpp.site import quiz

        chapter = self.arguments[0].strip()
        try:
            qs = quiz.page_questions(chapter)
        except ValueError as exc:
            raise self.error(str(exc)) from exc
        out: list[nodes.Node] = [nodes.raw("", quiz.render_html(chapter), format="html")]
        text = "\n\n".join(
            f"{n}. {q.stem}\n" + "\n".join(f"   {quiz.LETTERS[i]}. {o.text}"
                                            for i, o in enumerate(q.options))
            for n, q in enumerate(qs, 1))
        out.append(nodes.raw("", text, format="latex"))
        return out


def _prepare(app, env, docnames) -> None:
    """``env-before-read-docs``, after ``tpp_execute`` has started the chapters' executions:
    when a chapter is to be read, the question bank is built now (about 1 s, its SymPy bubble
    fractions), while a warm rebuild's edited chapter still executes, instead of at the first
    ``tpp-quiz`` directive, after that execution. The same computation, once per build."""
    if any(doc.startswith("chapters/") for doc in docnames):
        from tpp.site.quiz import bank

        bank.questions()


def _static_path(app, config) -> None:
    if STATIC.is_dir() and str(STATIC) not in map(str, config.html_static_path) and not any(
            Path(app.srcdir, p).resolve() == STATIC for p in config.html_static_path):
        config.html_static_path.append(str(STATIC))


def setup(app):
    app.add_directive("tpp-quiz", TppQuiz)
    app.connect("config-inited", _static_path)
    app.connect("env-before-read-docs", _prepare, priority=600)  # after tpp_execute's (500)
    app.add_js_file("quiz/tpp_quiz.js")
    app.add_css_file("quiz/tpp_quiz.css")
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
