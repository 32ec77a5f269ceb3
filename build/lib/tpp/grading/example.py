"""A tiny master notebook in the exercise format, for the grader's tests, benchmark and docs.

``write_demo_master(folder)`` writes ``ex00_demo.ipynb`` with three questions:

- q1 (2 points): ``n_allreduce_fwd``, an int (all-reduces in the forward of a TP MLP: 1);
- q2 (3 points): a function ``shard_columns(w, tp)``, probed by a hidden cell on an input the
  learner never sees (``_probe_q2``);
- q3 (1 point): ``bubble_fraction``, a ``Fraction`` ((p - 1) / (m + p - 1) for p = 4, m = 32).

``answer_sources(...)`` gives the source of each answer cell for a submission, correct or not.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat

ASSIGNMENT = "ex00_demo"

CORRECT = {
    "a-q1": "n_allreduce_fwd = 1\n",
    "a-q2": "def shard_columns(w, tp):\n    return np.split(w, tp, axis=1)\n",
    "a-q3": "bubble_fraction = Fraction(4 - 1, 32 + 4 - 1)\n",
}
WRONG = {
    "a-q1": "n_allreduce_fwd = 2\n",
    "a-q2": "def shard_columns(w, tp):\n    return np.split(w, tp, axis=0)\n",
    "a-q3": "bubble_fraction = Fraction(4 - 1, 32)\n",
}


def _code(cid: str, source: str, role: str | None = None, q: str | None = None) -> dict:
    cell = nbformat.v4.new_code_cell(source)
    cell["id"] = cid
    if role:
        cell.metadata["tags"] = [role]
        cell.metadata["tpp"] = {"question": q}
    return cell


def _md(cid: str, source: str) -> dict:
    cell = nbformat.v4.new_markdown_cell(source)
    cell["id"] = cid
    return cell


def demo_master() -> nbformat.NotebookNode:
    """The demo master notebook (solutions between BEGIN/END SOLUTION markers)."""
    nb = nbformat.v4.new_notebook()
    nb.nbformat_minor = 5
    nb.metadata = nbformat.from_dict(
        {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "tpp": {
                "assignment": ASSIGNMENT,
                "title": "Demo: a three-question exercise",
                "chapter": "02_tp_mlp",
                "questions": [
                    {"id": "q1", "points": 2, "answers": ["n_allreduce_fwd"], "rtol": 0,
                     "atol": 0},
                    {"id": "q2", "points": 3, "answers": ["_probe_q2"], "rtol": 1e-12,
                     "atol": 0},
                    {"id": "q3", "points": 1, "answers": ["bubble_fraction"]},
                ],
            },
        }
    )
    nb.cells = [
        _md("intro", "# Demo exercise\nSet the variables named in each question."),
        _code("setup", "import numpy as np\nfrom fractions import Fraction"),
        _md("p-q1", "**q1.** How many all-reduces does the forward of a TP MLP need? "
                    "Set `n_allreduce_fwd` (an int)."),
        _code("a-q1", "# BEGIN SOLUTION\nn_allreduce_fwd = 1\n# END SOLUTION", "answer", "q1"),
        _code(
            "c-q1",
            'assert isinstance(n_allreduce_fwd, int), "n_allreduce_fwd must be an int"\n'
            'assert 0 <= n_allreduce_fwd <= 4, "between 0 and 4 all-reduces"',
            "check",
            "q1",
        ),
        _md("p-q2", "**q2.** Write `shard_columns(w, tp)`: the column shards of `w`."),
        _code(
            "a-q2",
            "def shard_columns(w, tp):\n    # BEGIN SOLUTION\n"
            "    return np.split(w, tp, axis=1)\n    # END SOLUTION",
            "answer",
            "q2",
        ),
        _code(
            "c-q2",
            "_parts = shard_columns(np.ones((2, 4)), 2)\n"
            'assert len(_parts) == 2, "tp=2 gives two shards"\n'
            'assert all(p.shape == (2, 2) for p in _parts), "each shard keeps every row"',
            "check",
            "q2",
        ),
        _code(
            "h-q2",
            "_probe_q2 = [p.tolist() for p in shard_columns(np.arange(18.0).reshape(3, 6), 3)]",
            "hidden",
            "q2",
        ),
        _md("p-q3", "**q3.** The GPipe bubble for p = 4, m = 32, as a `Fraction`."),
        _code(
            "a-q3",
            "# BEGIN SOLUTION\nbubble_fraction = Fraction(4 - 1, 32 + 4 - 1)\n# END SOLUTION",
            "answer",
            "q3",
        ),
        _code(
            "c-q3",
            'assert isinstance(bubble_fraction, Fraction), "use fractions.Fraction"\n'
            'assert 0 < bubble_fraction < 1, "a share of time is between 0 and 1"',
            "check",
            "q3",
        ),
    ]
    return nb


def write_demo_master(folder: str | Path) -> Path:
    """Write the demo master as ``folder/ex00_demo.ipynb`` and return its path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{ASSIGNMENT}.ipynb"
    path.write_text(nbformat.writes(demo_master()) + "\n", encoding="utf-8")
    return path


def submission(exercise: dict[str, Any], sources: dict[str, str]) -> dict[str, Any]:
    """A copy of the exercise notebook (a dict) with answer cells replaced by ``sources``."""
    nb = json.loads(json.dumps(exercise))
    for cell in nb["cells"]:
        if cell.get("id") in sources:
            cell["source"] = sources[cell["id"]]
    return nb
