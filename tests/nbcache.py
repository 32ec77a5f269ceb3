"""pytest plugin: each chapter executed once (issue 22).

The strict book build (``make book``: ``execute_notebooks: cache``, ``nb_execution_raise_on_error``)
executes every chapter and stores the executed notebook in jupyter-cache
(``_build/.jupyter_cache``) only when no cell raised. ``make test`` collects the chapters with
nbmake as before; this plugin replaces a chapter's nbmake run by a check of its cached execution
when that execution is current:

* a cache record matches the notebook's current code cells and kernel (jupyter-cache's hash,
  the one myst-nb looks up), and
* it is newer than every source file of the library ``lib/tpp`` (the chapters import it),

and the check fails if any code cell of the cached notebook did not run or shows an error
(cells tagged ``raises-exception`` may show one, as under nbmake). Otherwise (no build yet, a
chapter or the library edited since) nbmake executes the chapter as usual, so ``make test`` on
a fresh clone still tests everything. Solutions and exercises always run through nbmake.
``TPP_RERUN_CHAPTERS=1`` makes nbmake run every chapter.
"""

from __future__ import annotations

import os
from datetime import UTC
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "_build" / ".jupyter_cache"  # jupyter-book's default for execute.cache ""
CHAPTERS = ROOT / "chapters"


def library_mtime(root: Path = ROOT) -> float:
    """Newest modification time of the library's sources (``lib/tpp/**/*.py``)."""
    return max((p.stat().st_mtime for p in (root / "lib" / "tpp").rglob("*.py")), default=0.0)


def cached_execution(notebook: Path, cache_path: Path = CACHE, newer_than: float = 0.0):
    """The executed notebook jupyter-cache holds for ``notebook``'s current code, or ``None``
    when there is none or it is older than ``newer_than`` (a POSIX time)."""
    if not (cache_path / "global.db").exists():
        return None
    import nbformat
    from jupyter_cache import get_cache

    cache = get_cache(str(cache_path))
    nb = nbformat.read(str(notebook), as_version=4)
    try:
        record = cache.match_cache_notebook(nb)
    except KeyError:
        return None
    created = record.created
    if created.tzinfo is None:  # stored as UTC without its zone
        created = created.replace(tzinfo=UTC)
    if created.timestamp() < newer_than:
        return None
    _pk, merged = cache.merge_match_into_notebook(nb)  # the cached outputs in this notebook
    return merged, record


def execution_problems(nb) -> list[str]:
    """Code cells of an executed notebook that did not run or show an error (cells tagged
    ``raises-exception`` may show one; ``skip-execution`` cells are not run)."""
    problems = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        tags = set(cell.get("metadata", {}).get("tags", []))
        if "skip-execution" in tags:
            continue
        if cell.get("execution_count") is None:
            problems.append(f"cell {i} did not run")
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if errors and "raises-exception" not in tags:
            e = errors[0]
            problems.append(f"cell {i} raised {e.get('ename')}: {e.get('evalue')}")
    return problems


class CachedChapter(pytest.Item):
    """A chapter checked from its execution by the book build instead of run again."""

    def __init__(self, *, nb, record, filename: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.nb, self.record, self.filename = nb, record, filename

    def runtest(self) -> None:
        problems = execution_problems(self.nb)
        if problems:
            raise AssertionError(
                f"{self.filename}: the book build's execution (jupyter-cache record "
                f"{self.record.pk}) has problems: " + "; ".join(problems))

    def reportinfo(self):
        return self.path, 0, f"{self.filename} (executed by the book build, cache record "\
                             f"{self.record.pk})"


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    if os.environ.get("TPP_RERUN_CHAPTERS") == "1" or not (CACHE / "global.db").exists():
        return
    newer_than = library_mtime()
    for k, item in enumerate(items):
        path = Path(str(getattr(item, "path", ""))).resolve()
        if type(item).__name__ != "NotebookItem" or path.parent != CHAPTERS:
            continue
        found = cached_execution(path, CACHE, newer_than)
        if found is None:
            continue
        nb, record = found
        new = CachedChapter.from_parent(item.parent, name=item.name, nb=nb, record=record,
                                        filename=str(path.relative_to(ROOT)))
        for mark in item.own_markers:
            new.add_marker(mark)
        items[k] = new
