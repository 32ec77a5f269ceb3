"""Fixtures shared by the test modules.

``torch`` is an optional extra (``pip install -e ".[torch]"``, pinned to 2.13.0, a CPU build on our
machines). Tests that need it take the ``torch`` fixture: it skips with the command to run them
when torch is missing, and fails instead when ``TPP_REQUIRE_TORCH=1`` (CI sets it, so the
real-engine and PyTorch-comparison tests can never be skipped there unnoticed).
"""

from __future__ import annotations

import importlib
import os
import shutil
from pathlib import Path
from types import ModuleType

import pytest


@pytest.fixture(scope="session")
def torch() -> ModuleType:
    try:
        return importlib.import_module("torch")
    except ImportError:
        if os.environ.get("TPP_REQUIRE_TORCH") == "1":
            pytest.fail("TPP_REQUIRE_TORCH=1 but torch is not installed: "
                        "run `pip install -e \".[torch]\"` (torch==2.13.0, CPU build)")
        pytest.skip("torch is not installed: `pip install -e \".[torch]\"` to run this test")


def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of this test run that every pytest-xdist worker shares: a worker's basetemp is
    ``<run>/popen-gwN``, so the parent; without xdist, the session's basetemp."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(autouse=True, scope="session")
def _grader_reference_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The grader caches master reference values in the user's cache folder: keep the tests'
    copies in a temporary folder of this run instead (deleted with it), one for all workers.

    :func:`tpp.grading.reference.load_reference` keys each entry by the master's bytes, the
    library, the versions and the limits, and writes it atomically: a worker reuses what the
    other computed for the same master under the same limits, and never reads half a file.
    """
    if "TPP_GRADE_CACHE" not in os.environ:
        folder = run_folder(tmp_path_factory) / "grade-cache"
        folder.mkdir(mode=0o700, exist_ok=True)
        os.environ["TPP_GRADE_CACHE"] = str(folder)


@pytest.fixture(scope="session")
def bwrap() -> None:
    """The grader's OS sandbox (bubblewrap): skips where it cannot run, fails instead when
    ``TPP_REQUIRE_SANDBOX=1`` (CI sets it, so the sandbox tests cannot be skipped there)."""
    from tpp.grading import sandbox

    why = sandbox.probe()
    if why:
        if os.environ.get("TPP_REQUIRE_SANDBOX") == "1":
            pytest.fail(f"TPP_REQUIRE_SANDBOX=1 but the grader's sandbox cannot run: {why}")
        pytest.skip(f"no OS sandbox here ({why}): apt-get install bubblewrap")


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium driven by playwright: skips where either is missing, fails instead when
    ``TPP_REQUIRE_BROWSER=1`` (CI sets it). Its headless shell (Debian's
    ``chromium-headless-shell``: the same Blink, without the browser's interface, which is what
    playwright's own headless runs use) when installed: the pages' loads cost ~20 % less CPU."""
    chromium = (shutil.which("chromium-headless-shell") or shutil.which("chromium")
                or shutil.which("chromium-browser"))

    def missing(why: str) -> None:
        if os.environ.get("TPP_REQUIRE_BROWSER") == "1":
            pytest.fail(why)
        pytest.skip(why)

    if chromium is None:
        missing("chromium is not installed (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("playwright is not installed (pip install -e '.[dev]')")
    with sync_playwright() as p:
        # a busy machine can be slow to start Chromium: wait 3 minutes, not playwright's 30 s
        b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"],
                              timeout=180_000)
        yield b
        b.close()


# ------------------------------------------------------------------ scheduling on xdist workers
# make test runs ``-n 2 --dist loadfile --no-loadscope-reorder``: every test file goes to one
# worker, so a module fixture (a graded batch, the torch World, a browser) is built once per run.
# (``--dist loadgroup`` does not group with pytest 9.2 and pytest-xdist 3.8: xdist renames
# ``item._nodeid``, which pytest 9.2 no longer reads, so its groups were silently ignored and
# tests/test_distributed.py's World was started on both workers.)
FIRST = ("tests/test_grading.py", "tests/test_site_pages.py", "tests/test_grading_masters.py",
         "tests/test_grading_folder.py", "tests/test_grading_bounds.py",
         "tests/test_grading_lms.py", "tests/test_grading_sandbox.py",
         "tests/test_grading_guard.py", "tests/test_grading_load.py",
         "tests/test_grading_cgroups.py", "tests/test_distributed.py",
         "tests/test_explorers.py", "tests/test_planner_pytorch.py",
         "tests/test_grading_inputs.py", "tests/test_grading_params.py")
"""The costliest files, costliest first (issue 22: each grading file timed alone on a loaded
2-core machine, from ~80 s for the batch of tests/test_grading.py and ~70 s for the masters down
to ~10 s; the site's pages from a full run's durations, dozens of ~2 s browser checks): a worker
takes a file when it is free, so starting the long ones first lets the short ones fill the time
around them."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The files of :data:`FIRST` first, in that order; the rest in collection order (the order
    of tests within a file is kept). Without xdist only the order changes."""
    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::")[0]
        return FIRST.index(path) if path in FIRST else len(FIRST)

    items[:] = sorted(items, key=rank)  # stable: collection order otherwise
