"""Small helpers for the public check cells of a master notebook.

A check tells the learner whether an answer has the right *form*, never whether it is right:
points are decided by the grader, outside the learner's kernel. Each helper accepts exactly what
the grader accepts (any real number: ``int``, ``float``, ``fractions.Fraction``, NumPy scalars,
SymPy numbers; exact answers: ``Fraction``, SymPy rationals or integers), and on a wrong answer
raises :class:`CheckFailed` with one sentence that says what to fix — shown in JupyterLab without
a traceback. A check cell ends with :func:`passed`, which prints the explicit OK line::

    from tpp.grading.checks import check_defined, check_number, passed
    check_defined(globals(), "bubble_p8_m32")
    check_number("bubble_p8_m32", bubble_p8_m32, low=0, high=1, unit="a share of time")
    passed("q1", "a share between 0 and 1")

Checks stand alone: a check that compares with another answer uses :func:`usable` first, so a
missing or malformed q1 never breaks the check of q2.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from fractions import Fraction
from numbers import Integral, Rational, Real
from typing import Any

import numpy as np


class CheckFailed(AssertionError):
    """A public check failed; JupyterLab shows the message alone, not a traceback."""

    def _render_traceback_(self) -> list[str]:  # IPython's hook for custom error display
        return [f"\x1b[1;31m✗ {self}\x1b[0m"]


def _fail(message: str) -> None:
    raise CheckFailed(message)


def _kind(value: Any) -> str:
    return type(value).__name__


def is_number(value: Any) -> bool:
    """A real number the grader accepts (bool is not a number)."""
    if isinstance(value, (bool, np.bool_)):
        return False
    if isinstance(value, (Real, np.integer, np.floating)):
        return True
    return bool(getattr(value, "is_number", False) and getattr(value, "is_real", False)
                and getattr(value, "is_Number", False))


def is_exact(value: Any) -> bool:
    """An exact rational the grader compares exactly: int, Fraction, SymPy Rational/Integer."""
    if isinstance(value, (bool, np.bool_)):
        return False
    if isinstance(value, (Integral, np.integer, Fraction)):
        return True
    return bool(getattr(value, "is_Rational", False))


def as_fraction(value: Any) -> Fraction:
    """The exact value of ``value`` (see :func:`is_exact`)."""
    if getattr(value, "is_Rational", False):
        return Fraction(int(value.p), int(value.q))
    if isinstance(value, Rational):
        return Fraction(int(value.numerator), int(value.denominator))
    return Fraction(int(value))


def check_defined(namespace: dict[str, Any], *names: str) -> None:
    """Every name in ``names`` is set in ``namespace`` (pass ``globals()``)."""
    for name in names:
        if name not in namespace:
            _fail(f"set the variable {name} in the answer cell above (and run that cell)")


def check_type(name: str, value: Any, *types: type) -> None:
    """``value`` is an instance of one of ``types`` (bool never counts as a number)."""
    wanted = " or ".join(t.__name__ for t in types)
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
    if not ok:
        _fail(f"{name} must be {wanted}, not {_kind(value)}")


def check_number(
    name: str,
    value: Any,
    *,
    low: float | Fraction | None = None,
    high: float | Fraction | None = None,
    integer: bool = False,
    exact: bool = False,
    unit: str = "",
) -> None:
    """``value`` is a real number with ``low <= value <= high``.

    ``integer``: a whole number (``133``, ``np.int64(133)`` and ``133.0`` are all accepted, as
    the grader accepts them). ``exact``: an exact rational (``Fraction``, a SymPy rational or an
    int), because the grader compares the answer exactly and does not accept a float.
    """
    what = f" ({unit})" if unit else ""
    if not is_number(value):
        _fail(f"{name}{what} must be a number, not {_kind(value)}")
    if exact and not is_exact(value):
        _fail(f"{name}{what} must be exact: a fractions.Fraction (e.g. Fraction(7, 39)), a SymPy "
              f"Rational or an int, not {_kind(value)} (a float is rounded)")
    x = as_fraction(value) if is_exact(value) else float(value)
    if isinstance(x, float) and math.isnan(x):
        _fail(f"{name}{what} is NaN")
    if isinstance(x, float) and math.isinf(x):
        _fail(f"{name}{what} is infinite")
    if integer and x != int(x):
        _fail(f"{name}{what} must be a whole number, not {value}")
    if low is not None and x < low:
        _fail(f"{name}{what} must be at least {low}")
    if high is not None and x > high:
        _fail(f"{name}{what} must be at most {high}")


def check_list(name: str, value: Any, length: int | None = None) -> None:
    """``value`` is a list (or tuple) of ``length`` items."""
    if not isinstance(value, (list, tuple)):
        _fail(f"{name} must be a list, not {_kind(value)}")
    if length is not None and len(value) != length:
        _fail(f"{name} must have {length} entries, not {len(value)}")


def check_bool(name: str, value: Any) -> None:
    """``value`` is ``True`` or ``False``."""
    if not isinstance(value, (bool, np.bool_)):
        _fail(f"{name} must be True or False, not {_kind(value)}")


def check_shape(name: str, value: Any, shape: tuple[int, ...]) -> None:
    """``value`` is a numpy array of the given shape."""
    if not isinstance(value, np.ndarray):
        _fail(f"{name} must be a numpy array, not {_kind(value)}")
    if value.shape != tuple(shape):
        _fail(f"{name} has shape {value.shape}, expected {shape}")


def check_close(what: str, got: Any, expected: Any, rtol: float = 1e-9, atol: float = 0) -> None:
    """A self-consistency check: ``got`` equals ``expected`` (e.g. sharded == unsharded)."""
    try:
        a, b = np.asarray(got, dtype=float), np.asarray(expected, dtype=float)
    except (TypeError, ValueError):
        _fail(f"{what}: {_kind(got)} is not an array of numbers")
    if a.shape != b.shape:
        _fail(f"{what}: shapes {a.shape} and {b.shape} differ")
    if not np.allclose(a, b, rtol=rtol, atol=atol):
        _fail(f"{what}: the two do not agree")


def check_choice(name: str, value: Any, choices: str | list[str]) -> None:
    """``value`` is one of the letters/words in ``choices`` (case and spaces ignored)."""
    options = list(choices)
    if not isinstance(value, str):
        _fail(f"{name} must be a string, one of {options}, not {_kind(value)}")
    norm = " ".join(value.split()).casefold()
    allowed = [" ".join(c.split()).casefold() for c in options]
    if norm not in allowed:
        _fail(f"{name} must be one of {options}, not {value!r}")


def usable(namespace: dict[str, Any], name: str, test: Callable[[Any], bool] = is_number) -> bool:
    """Whether another question's answer is set and well-formed, for a cross-check."""
    return name in namespace and bool(test(namespace[name]))


@contextmanager
def calling(name: str) -> Iterator[None]:
    """Run the learner's function ``name``: any exception becomes one sentence, not a traceback."""
    try:
        yield
    except CheckFailed:
        raise
    except NotImplementedError:
        _fail(f"{name} is not written yet: fill in the answer cell above")
    except Exception as exc:  # the learner's code may raise anything
        _fail(f"{name} raised {type(exc).__name__}: {exc}")


def passed(question: str, what: str = "the value is graded later") -> None:
    """The explicit last line of a check cell: ``q2: format OK — <what>``."""
    print(f"{question}: format OK — {what}")
