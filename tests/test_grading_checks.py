"""The check-cell helpers: pass on good values, fail with a message that says what to fix."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import sympy
from tpp.grading.checks import (
    CheckFailed,
    calling,
    check_bool,
    check_choice,
    check_close,
    check_defined,
    check_list,
    check_number,
    check_shape,
    check_type,
    passed,
    usable,
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
        (lambda: check_number("n", 2.5, integer=True), "must be a whole number"),
        (lambda: check_number("b", 0.25, exact=True), "must be exact: a fractions.Fraction"),
        (lambda: check_number("b", sympy.Symbol("x")), "must be a number, not Symbol"),
        (lambda: check_number("b", float("inf")), "is infinite"),
        (lambda: check_list("p", (1, 2), length=3), "must have 3 entries"),
        (lambda: check_list("p", 3), "must be a list, not int"),
        (lambda: check_bool("z", 1), "must be True or False"),
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


@pytest.mark.parametrize(
    "value", [sympy.Rational(7, 39), np.int64(133), 133.0, 133, Fraction(133, 1),
              sympy.Integer(133), np.float32(0.5), sympy.Float(0.5)],
)
def test_numbers_the_grader_accepts_pass(value):
    """What the grader accepts as a number (numbers.Real, NumPy and SymPy scalars) passes."""
    check_number("x", value, low=0, high=1000)


@pytest.mark.parametrize("value", [133, np.int64(133), 133.0, sympy.Integer(133)])
def test_whole_numbers_in_any_form_pass(value):
    check_number("n", value, integer=True, low=1)


@pytest.mark.parametrize("value", [Fraction(7, 39), sympy.Rational(7, 39), 3, np.int64(3)])
def test_exact_answers_pass(value):
    check_number("b", value, exact=True, low=0)


def test_a_failure_is_one_sentence_without_a_traceback():
    with pytest.raises(CheckFailed) as info:
        check_number("n_allreduce_forward", "3", integer=True)
    lines = info.value._render_traceback_()   # what IPython shows instead of the traceback
    assert len(lines) == 1 and "n_allreduce_forward must be a number, not str" in lines[0]
    assert isinstance(info.value, AssertionError)   # nbmake and the grader see a failure


def test_calling_turns_the_learners_exception_into_a_message():
    with pytest.raises(CheckFailed, match="not written yet"):
        with calling("f"):
            raise NotImplementedError
    with pytest.raises(CheckFailed, match="f raised TypeError: bad operand"):
        with calling("f"):
            raise TypeError("bad operand")


def test_usable_and_passed(capsys):
    assert usable({"a": 0.5}, "a") and not usable({"a": "0.5"}, "a") and not usable({}, "a")
    passed("q2", "a count in range; the value is graded later")
    out = capsys.readouterr().out
    assert out == "q2: format OK — a count in range; the value is graded later\n"
