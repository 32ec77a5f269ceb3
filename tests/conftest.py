"""Fixtures shared by the test modules.

``torch`` is an optional extra (``pip install -e ".[torch]"``, pinned to 2.13.0, a CPU build on our
machines). Tests that need it take the ``torch`` fixture: it skips with the command to run them
when torch is missing, and fails instead when ``TPP_REQUIRE_TORCH=1`` (CI sets it, so the
real-engine and PyTorch-comparison tests can never be skipped there unnoticed).
"""

from __future__ import annotations

import importlib
import os
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
