"""``TPP_HIDE_SOLUTIONS=1 make book``: the site is built without the solutions of graded
exercises (those linking a notebook of ``exercises/``); other solutions stay."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

PAGE = """# Page

```{exercise} Graded
:label: ex-graded
The notebook is {download}`exercises/ex99.ipynb <exercises/ex99.ipynb>`.
```

```{solution} ex-graded
:class: dropdown
GRADED-ANSWER-42
```

```{exercise} Self-study
:label: ex-free
Work it out.
```

```{solution} ex-free
:class: dropdown
FREE-ANSWER-17
```
"""


def _build(tmp_path: Path, hide: bool) -> str:
    src = tmp_path / "src"
    (src / "exercises").mkdir(parents=True, exist_ok=True)
    (src / "exercises" / "ex99.ipynb").write_text("{}")
    (src / "index.md").write_text(PAGE)
    (src / "conf.py").write_text(
        "extensions = ['myst_parser', 'sphinx_exercise', 'tpp.grading.hide_solutions']\n"
        "myst_enable_extensions = ['colon_fence']\n"
    )
    out = tmp_path / ("hidden" if hide else "full")
    env = {k: v for k, v in os.environ.items() if k != "TPP_HIDE_SOLUTIONS"}
    if hide:
        env["TPP_HIDE_SOLUTIONS"] = "1"
    res = subprocess.run(
        [sys.executable, "-m", "sphinx", "-q", "-b", "html", str(src), str(out)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    return (out / "index.html").read_text()


def test_hidden_build_drops_only_graded_solutions(tmp_path):
    full = _build(tmp_path, hide=False)
    assert "GRADED-ANSWER-42" in full and "FREE-ANSWER-17" in full
    hidden = _build(tmp_path, hide=True)
    assert "GRADED-ANSWER-42" not in hidden
    assert "FREE-ANSWER-17" in hidden
    assert "Graded" in hidden  # the exercise itself is still there
