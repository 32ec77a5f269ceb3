"""``tpp assign``: generate the learner's notebooks (``exercises/``) from the masters.

The generation is a pure function of the master's bytes, so ``exercises/`` can be checked for
drift (``tpp assign --check``):

- each ``# BEGIN SOLUTION`` ... ``# END SOLUTION`` block becomes ``# YOUR CODE HERE`` and
  ``raise NotImplementedError()`` at the block's indentation;
- hidden cells are removed; outputs and execution counts are cleared;
- metadata is rebuilt minimal: kernel ``python3``, and ``tpp`` with the assignment, title,
  chapter and the public part of each question (id, points, answer names); cell ids are kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import nbformat

from tpp.grading.notebook import Cell, Master, find_masters, parse_master, solution_blocks

STUB = ("# YOUR CODE HERE", "raise NotImplementedError()")
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def stub_source(source: str) -> str:
    """Replace every solution block of ``source`` by the stub, at the block's indentation."""
    lines = source.split("\n")
    out: list[str] = []
    pos = 0
    for begin, end, indent in solution_blocks(source):
        out.extend(lines[pos:begin])
        out.extend(indent + s for s in STUB)
        pos = end + 1
    out.extend(lines[pos:])
    return "\n".join(out)


def _exercise_cell(cell: Cell) -> nbformat.NotebookNode:
    if cell.cell_type == "markdown":
        new = nbformat.v4.new_markdown_cell(cell.source)
        if cell.attachments:
            new["attachments"] = cell.attachments
    elif cell.cell_type == "raw":
        new = nbformat.v4.new_raw_cell(cell.source)
    else:
        source = stub_source(cell.source) if cell.role == "answer" else cell.source
        new = nbformat.v4.new_code_cell(source)
        if cell.tags:
            new.metadata["tags"] = list(cell.tags)
        if cell.role:
            new.metadata["tpp"] = {"question": cell.question}
        if cell.role == "check":
            new.metadata["editable"] = False
            new.metadata["deletable"] = False
    new["id"] = cell.id
    return new


def exercise_notebook(master: Master) -> nbformat.NotebookNode:
    """The learner's notebook for ``master`` (hidden cells dropped, solutions stubbed)."""
    nb = nbformat.v4.new_notebook()
    nb.nbformat_minor = 5
    nb.metadata = nbformat.from_dict(
        {
            "kernelspec": dict(KERNELSPEC),
            "language_info": {"name": "python"},
            "tpp": {
                "assignment": master.assignment,
                "title": master.title,
                "chapter": master.chapter,
                "questions": [q.public() for q in master.questions],
            },
        }
    )
    nb.cells = [_exercise_cell(c) for c in master.cells if c.role != "hidden"]
    return nb


def exercise_text(master: Master) -> str:
    """The exact file content of the generated exercise (deterministic)."""
    nb = exercise_notebook(master)
    nbformat.validate(nb)
    return nbformat.writes(nb, version=4) + "\n"


@dataclass(frozen=True)
class Drift:
    """How ``exercises/`` differs from what the masters generate."""

    stale: tuple[str, ...]
    missing: tuple[str, ...]
    extra: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.stale or self.missing or self.extra)

    def describe(self) -> str:
        parts = []
        for label, names in (
            ("stale (differs from its master)", self.stale),
            ("missing", self.missing),
            ("extra (no master in solutions/)", self.extra),
        ):
            parts.extend(f"  {label}: {n}" for n in names)
        return "\n".join(parts)


def expected_exercises(solutions: str | Path) -> dict[str, str]:
    """File name -> content of every exercise the masters in ``solutions`` generate."""
    return {p.name: exercise_text(parse_master(p)) for p in find_masters(solutions)}


def check(solutions: str | Path, exercises: str | Path) -> Drift:
    """Compare ``exercises/`` with what ``solutions/`` generates, without writing anything."""
    expected = expected_exercises(solutions)
    exercises = Path(exercises)
    present = (
        {p.name for p in exercises.glob("*.ipynb") if p.is_file()} if exercises.is_dir() else set()
    )
    stale = sorted(
        n
        for n in expected
        if n in present and (exercises / n).read_text(encoding="utf-8") != expected[n]
    )
    missing = sorted(set(expected) - present)
    extra = sorted(present - set(expected))
    return Drift(tuple(stale), tuple(missing), tuple(extra))


def assign(solutions: str | Path, exercises: str | Path) -> list[str]:
    """Regenerate ``exercises/`` from ``solutions/``; return the names written or removed.

    Every master is validated before anything is written. Exercise notebooks without a
    master are removed (``exercises/`` holds generated files only).
    """
    expected = expected_exercises(solutions)
    exercises = Path(exercises)
    exercises.mkdir(parents=True, exist_ok=True)
    changed: list[str] = []
    for name, text in expected.items():
        target = exercises / name
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            tmp = target.with_suffix(".ipynb.tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(target)
            changed.append(name)
    for p in sorted(exercises.glob("*.ipynb")):
        if p.name not in expected:
            p.unlink()
            changed.append(f"{p.name} (removed)")
    return changed
