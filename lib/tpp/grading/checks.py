"""Small helpers for the public check cells of a master notebook.

Each helper raises ``AssertionError`` with a message that tells the learner what to fix, and
never reveals the answer: it checks the type, a range, a shape or a self-consistency. Use them
in a ``check`` cell::

    from tpp.grading.checks import check_defined, check_number
    check_defined(globals(), "bubble_p8_m32")
    check_number("bubble_p8_m32", bubble_p8_m32, low=0, high=1, unit="a share of time")

They only give feedback: points are decided by the grader, outside the learner's kernel.
"""

from __future__ import annotations

from fractions import Fraction
from numbers import Real
from typing import Any

import numpy as np


def check_defined(namespace: dict[str, Any], *names: str) -> None:
    """Every name in ``names`` is set in ``namespace`` (pass ``globals()``)."""
    for name in names:
        assert name in namespace, f"set the variable {name} in the answer cell above"


def check_type(name: str, value: Any, *types: type) -> None:
    """``value`` is an instance of one of ``types`` (bool never counts as a number)."""
    wanted = " or ".join(t.__name__ for t in types)
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
    assert ok, f"{name} must be {wanted}, not {type(value).__name__}"


def check_number(
    name: str,
    value: Any,
    *,
    low: float | Fraction | None = None,
    high: float | Fraction | None = None,
    integer: bool = False,
    unit: str = "",
) -> None:
    """``value`` is a real number (an int if ``integer``) with ``low <= value <= high``."""
    what = f" ({unit})" if unit else ""
    real = isinstance(value, (Real, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_)
    )
    assert real, f"{name}{what} must be a number, not {type(value).__name__}"
    if integer:
        assert isinstance(value, (int, np.integer)), f"{name}{what} must be an int"
    assert value == value, f"{name}{what} is NaN"
    if low is not None:
        assert value >= low, f"{name}{what} must be at least {low}"
    if high is not None:
        assert value <= high, f"{name}{what} must be at most {high}"


def check_shape(name: str, value: Any, shape: tuple[int, ...]) -> None:
    """``value`` is a numpy array of the given shape."""
    assert isinstance(value, np.ndarray), f"{name} must be a numpy array"
    assert value.shape == tuple(shape), f"{name} has shape {value.shape}, expected {shape}"


def check_close(what: str, got: Any, expected: Any, rtol: float = 1e-9, atol: float = 0) -> None:
    """A self-consistency check: ``got`` equals ``expected`` (e.g. sharded == unsharded)."""
    a, b = np.asarray(got, dtype=float), np.asarray(expected, dtype=float)
    assert a.shape == b.shape, f"{what}: shapes {a.shape} and {b.shape} differ"
    assert np.allclose(a, b, rtol=rtol, atol=atol), f"{what}: the two do not agree"


def check_choice(name: str, value: Any, choices: str | list[str]) -> None:
    """``value`` is one of the letters/words in ``choices`` (case and spaces ignored)."""
    options = list(choices)
    assert isinstance(value, str), f"{name} must be a string, one of {options}"
    norm = " ".join(value.split()).casefold()
    allowed = [" ".join(c.split()).casefold() for c in options]
    assert norm in allowed, f"{name} must be one of {options}, not {value!r}"
