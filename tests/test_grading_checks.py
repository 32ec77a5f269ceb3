"""The check-cell helpers: pass on good values, fail with a message that says what to fix."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from tpp.grading.checks import (
    check_choice,
    check_close,
    check_defined,
    check_number,
    check_shape,
    check_type,
)


def test_good_values_pass():
    check_defined({"x": 1}, "x")
    check_type("x", Fraction(1, 3), Fraction, float)
    check_number("b", Fraction(3, 35), low=0, high=1)
    check_number("n", np.int64(4), integer=True, low=1)
    check_shape("y", np.zeros((2, 3)), (2, 3))
    check_close("sharded vs unsharded", [1.0, 2.0], np.array([1.0, 2.0 + 1e-12]))
    check_choice("c", "  b ", "ABC")


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: check_defined({}, "bubble"), "set the variable bubble"),
        (lambda: check_type("x", True, int), "must be int, not bool"),
        (lambda: check_type("x", "1", int, float), "must be int or float, not str"),
        (lambda: check_number("b", "0.1"), "must be a number, not str"),
        (lambda: check_number("b", True), "must be a number, not bool"),
        (lambda: check_number("b", float("nan")), "is NaN"),
        (lambda: check_number("b", 1.5, high=1, unit="share"), r"b \(share\) must be at most 1"),
        (lambda: check_number("b", -1, low=0), "must be at least 0"),
        (lambda: check_number("n", 2.0, integer=True), "must be an int"),
        (lambda: check_shape("y", [1, 2], (2,)), "must be a numpy array"),
        (lambda: check_shape("y", np.zeros(3), (2,)), r"has shape \(3,\), expected \(2,\)"),
        (lambda: check_close("out", [1.0], [1.0, 2.0]), "shapes"),
        (lambda: check_close("out", [1.0], [1.1]), "do not agree"),
        (lambda: check_choice("c", "D", "ABC"), "must be one of"),
        (lambda: check_choice("c", 1, "ABC"), "must be a string"),
    ],
)
def test_bad_values_fail_with_a_helpful_message(call, match):
    with pytest.raises(AssertionError, match=match):
        call()
