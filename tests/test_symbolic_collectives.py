"""Tests of tpp.symbolic.collectives: the SymPy ring derivation equals the hand closed forms,
agrees with tpp.collectives' Fractions, and the chain-rule identities for f and g hold."""

from __future__ import annotations

from fractions import Fraction

import pytest
import sympy as sp
from tpp.collectives import bus_factor, ring_steps
from tpp.symbolic import collectives as sc

N, M, alpha, B = sc.N, sc.M, sc.alpha, sc.B


def test_ring_all_reduce_bytes_closed_form():
    assert sp.simplify(sc.all_reduce_bytes_per_rank() - 2 * (N - 1) * M / N) == 0
    assert sp.simplify(sc.reduce_scatter_bytes_per_rank() - (N - 1) * M / N) == 0
    assert sp.simplify(sc.all_gather_bytes_per_rank() - (N - 1) * M / N) == 0
    # the unevaluated form is a sum over steps; evaluating it gives the same result
    unevaluated = sc.all_reduce_bytes_per_rank(unevaluated=True)
    assert unevaluated.has(sp.Sum)
    assert sp.simplify(unevaluated.doit() - 2 * (N - 1) * M / N) == 0


@pytest.mark.parametrize("op", ["all_reduce", "reduce_scatter", "all_gather", "broadcast"])
@pytest.mark.parametrize("n", range(1, 17))
def test_symbolic_factor_equals_library_fraction(op, n):
    value = sc.ring_factor(op).subs(N, n)
    assert sp.Rational(value) == sp.Rational(bus_factor(op, n).numerator,
                                             bus_factor(op, n).denominator)
    if n > 1:
        assert sc.ring_steps(op).subs(N, n) == ring_steps(op, n)


def test_alpha_beta_expression():
    expected = 2 * (N - 1) * alpha + 2 * (N - 1) * M / (N * B)
    assert sp.simplify(sc.alpha_beta_time("all_reduce") - expected) == 0
    t = sc.alpha_beta_time("all_gather").subs({N: 4, M: 800, B: 100, alpha: 0})
    assert t == 6
    assert Fraction(2 * 7, 8) == Fraction(str(sc.ring_factor().subs(N, 8)))


@pytest.mark.parametrize("T", [1, 2, 5, 8])
def test_copy_backward_is_sum(T):
    dL_dx, summed = sc.copy_backward_is_sum(T)
    assert sp.simplify(dL_dx - summed) == 0
    assert len(sp.Add.make_args(dL_dx)) == T  # one incoming gradient per rank
    x = sp.Symbol("x")
    # with concrete l_t(y) = t * y**2 the derivative is sum_t 2 t x
    concrete = {sp.Function(f"l_{t}"): sp.Lambda(sp.Symbol("u"), t * sp.Symbol("u") ** 2)
                for t in range(1, T + 1)}
    value = dL_dx.subs(concrete).doit()
    assert sp.simplify(value - sum(2 * t * x for t in range(1, T + 1))) == 0


@pytest.mark.parametrize("T", [1, 3, 6])
def test_sum_backward_is_copy(T):
    grads, dL_dy = sc.sum_backward_is_copy(T)
    assert len(grads) == T
    for g in grads:
        assert sp.simplify(g - dL_dy) == 0


def test_invalid_inputs():
    with pytest.raises(ValueError, match="unknown op 'gather': use one of all_reduce"):
        sc.ring_factor("gather")
    with pytest.raises(ValueError, match="T=0 must be a positive integer"):
        sc.copy_backward_is_sum(0)
