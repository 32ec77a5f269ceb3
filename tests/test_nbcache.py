"""tests/nbcache.py: a chapter's cached execution is used only when it matches the current code
cells and is newer than the library, and a cached error still fails."""

from __future__ import annotations

import time

import nbcache
import nbformat
from jupyter_cache import get_cache
from jupyter_cache.cache.main import CacheBundleIn


def _notebook(path, source="x = 1\nprint(x)", outputs=None, tags=()):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    cell = nbformat.v4.new_code_cell(source, metadata={"tags": list(tags)})
    nb.cells = [nbformat.v4.new_markdown_cell("# t"), cell]
    nbformat.write(nb, str(path))
    executed = nbformat.from_dict(nb)
    executed.cells[1].execution_count = 1
    executed.cells[1].outputs = outputs if outputs is not None else [
        nbformat.v4.new_output("stream", name="stdout", text="1\n")]
    return executed


def test_match_stale_and_errors(tmp_path):
    path = tmp_path / "ch.ipynb"
    executed = _notebook(path)
    cache_dir = tmp_path / "cache"
    cache = get_cache(str(cache_dir))
    cache.cache_notebook_bundle(CacheBundleIn(executed, str(path)), check_validity=False)
    found = nbcache.cached_execution(path, cache_dir)
    assert found is not None
    nb, _record = found
    assert nb.cells[1].outputs[0]["text"] == "1\n"
    assert nbcache.execution_problems(nb) == []
    # older than the library: stale
    assert nbcache.cached_execution(path, cache_dir, newer_than=time.time() + 60) is None
    # a markdown edit keeps the match, a code edit loses it
    src = nbformat.read(str(path), as_version=4)
    src.cells[0].source = "# edited"
    nbformat.write(src, str(path))
    assert nbcache.cached_execution(path, cache_dir) is not None
    src.cells[1].source = "x = 2\nprint(x)"
    nbformat.write(src, str(path))
    assert nbcache.cached_execution(path, cache_dir) is None
    assert nbcache.cached_execution(path, tmp_path / "no-cache") is None


def test_problems_named(tmp_path):
    err = nbformat.v4.new_output("error", ename="AssertionError", evalue="1 != 2", traceback=[])
    nb = _notebook(tmp_path / "a.ipynb", outputs=[err])
    assert nbcache.execution_problems(nb) == ["cell 1 raised AssertionError: 1 != 2"]
    nb = _notebook(tmp_path / "b.ipynb", outputs=[err], tags=["raises-exception"])
    assert nbcache.execution_problems(nb) == []
    nb = _notebook(tmp_path / "c.ipynb")
    nb.cells[1].execution_count = None
    assert nbcache.execution_problems(nb) == ["cell 1 did not run"]


def test_library_mtime_sees_sources():
    assert nbcache.library_mtime() >= (nbcache.ROOT / "lib" / "tpp" / "__init__.py").stat().st_mtime


def test_pre_execution_runs_a_notebook_and_reports_a_failure(tmp_path, monkeypatch):
    """_ext/tpp_execute.py: a worker returns the executed notebook, or the traceback of a cell
    that raised (then nothing is cached and myst-nb runs it again); bad TPP_BUILD_JOBS is a
    ValueError saying what to set."""
    import sys

    import pytest

    sys.path.insert(0, str(nbcache.ROOT / "_ext"))
    import tpp_execute

    good, bad = tmp_path / "good.ipynb", tmp_path / "bad.ipynb"
    _notebook(good, source="print(6 * 7)")
    _notebook(bad, source="raise RuntimeError('boom')")
    path, text, _seconds, tb = tpp_execute.execute_one(str(good), 120, False)
    assert tb is None and "42" in nbformat.reads(text, as_version=4).cells[1].outputs[0]["text"]
    path, text, _seconds, tb = tpp_execute.execute_one(str(bad), 120, False)
    assert text is None and "boom" in tb
    monkeypatch.setenv("TPP_BUILD_JOBS", "two")
    with pytest.raises(ValueError, match="TPP_BUILD_JOBS"):
        tpp_execute.jobs()
    monkeypatch.setenv("TPP_BUILD_JOBS", "3")
    assert tpp_execute.jobs() == 3
