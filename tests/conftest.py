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


@pytest.fixture(autouse=True, scope="session")
def _grader_reference_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The grader caches master reference values in the user's cache folder: keep the tests'
    copies in a temporary folder of the session instead (deleted with it)."""
    os.environ.setdefault("TPP_GRADE_CACHE", str(tmp_path_factory.mktemp("grade-cache")))


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
    ``TPP_REQUIRE_BROWSER=1`` (CI sets it)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")

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
