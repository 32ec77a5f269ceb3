"""Tests of tpp.symbolic.tp_mlp: the column-then-row identity, the non-additivity of GELU,
and the per-rank FLOP and weight counts (checked against brute-force counts)."""

import math

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from tpp.symbolic import tp_mlp


@pytest.mark.parametrize("tp", [1, 2, 3, 4])
def test_block_output_is_sum_of_rank_products(tp):
    der = tp_mlp.block_column_row(tp)
    assert der.output == der.expected_output
    # The expected sum has exactly tp terms H^(t) W2^(t).
    terms = der.expected_output.args if tp > 1 else (der.expected_output,)
    assert len(terms) == tp


@pytest.mark.parametrize("tp", [2, 3])
def test_block_pre_activation_is_row_of_blocks(tp):
    der = tp_mlp.block_column_row(tp)
    blocks = der.pre_activation.blocks
    assert blocks.shape == (1, tp)
    for t in range(tp):
        assert str(blocks[0, t]) == f"X*W_1^{{({t + 1})}}"


@pytest.mark.parametrize("tp", [2, 3])
def test_row_column_preactivation_is_sum_of_partials(tp):
    collapsed, expected = tp_mlp.block_row_column_preactivation(tp)
    assert collapsed == expected
    assert len(expected.args) == tp


@pytest.mark.parametrize("activation", ["gelu", "swiglu"])
@pytest.mark.parametrize("tp", [1, 2, 3])
def test_explicit_difference_is_zero(tp, activation):
    der = tp_mlp.explicit_column_row(tp, n=1, d=2, k=1, activation=activation)
    assert der.difference == sp.zeros(1, 2)
    assert len(der.partials) == tp


def test_single_partial_is_not_the_output():
    # A test that can fail: for tp >= 2 no single rank holds the answer.
    der = tp_mlp.explicit_column_row(2, n=1, d=2, k=1)
    assert (der.unsharded - der.partials[0]).applyfunc(sp.expand) != sp.zeros(1, 2)


def test_explicit_matches_numpy_with_concrete_sigma():
    rng = np.random.default_rng(0)
    der = tp_mlp.explicit_column_row(3, n=2, d=2, k=2, activation="swiglu")
    subs = {}
    arrays = {}
    for name, mat in (("x", der.x), ("w1", der.w1), ("w2", der.w2), ("w3", der.w3)):
        vals = rng.standard_normal(mat.shape)
        arrays[name] = vals
        subs.update({mat[i, j]: vals[i, j] for i in range(mat.rows) for j in range(mat.cols)})
    sigma = sp.Function("sigma")
    expr = der.unsharded.subs(subs).replace(sigma, lambda z: sp.tanh(z))
    got = np.array(expr.evalf(), dtype=float)
    x, w1, w2, w3 = arrays["x"], arrays["w1"], arrays["w2"], arrays["w3"]
    want = (np.tanh(x @ w1) * (x @ w3)) @ w2
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_gelu_defect_at_one_one_matches_math_erf():
    a, b = sp.Integer(1), sp.Integer(1)
    defect = tp_mlp.additivity_defect(tp_mlp.gelu_erf, a, b)

    def gelu(v):
        return 0.5 * v * (1 + math.erf(v / math.sqrt(2)))

    assert float(defect) == pytest.approx(gelu(2.0) - 2 * gelu(1.0), rel=1e-14)
    assert abs(float(defect)) > 0.1


def test_linear_function_has_no_defect():
    a, b = sp.symbols("a b")
    assert sp.expand(tp_mlp.additivity_defect(lambda z: 3 * z, a, b)) == 0


def test_second_mixed_derivative():
    _, at0 = tp_mlp.second_mixed_derivative_of_defect(tp_mlp.gelu_erf)
    assert sp.simplify(at0 - sp.sqrt(2 / sp.pi)) == 0
    _, at0_sq = tp_mlp.second_mixed_derivative_of_defect(lambda z: z**2)
    assert at0_sq == 2
    _, at0_lin = tp_mlp.second_mixed_derivative_of_defect(lambda z: 5 * z)
    assert at0_lin == 0
    _, at0_silu = tp_mlp.second_mixed_derivative_of_defect(tp_mlp.silu)
    assert at0_silu == sp.Rational(1, 2)  # silu''(0) = 1/2


def _brute_force_madds(n, d, d_ff, tp, activation):
    """Count multiply-adds by walking every (row, col, inner) index of each local matmul."""
    k = d_ff // tp
    shapes = [(n, d, k), (n, k, d)]
    if activation == "swiglu":
        shapes.append((n, d, k))
    count = 0
    for m, inner, p in shapes:
        for _ in range(m):
            for _ in range(p):
                for _ in range(inner):
                    count += 1
    return count


@settings(max_examples=20, deadline=None)
@given(
    n=st.integers(1, 4),
    d=st.integers(1, 5),
    k=st.integers(1, 4),
    tp=st.integers(1, 4),
    activation=st.sampled_from(["gelu", "swiglu"]),
)
def test_flops_match_brute_force(n, d, k, tp, activation):
    d_ff = k * tp
    flops = tp_mlp.mlp_flops_per_rank(n, d, d_ff, tp, activation)
    assert flops == 2 * _brute_force_madds(n, d, d_ff, tp, activation)


@settings(max_examples=20, deadline=None)
@given(d=st.integers(1, 6), k=st.integers(1, 6), tp=st.integers(1, 6))
def test_weight_params_match_shard_sizes(d, k, tp):
    d_ff = k * tp
    w1 = np.zeros((d, d_ff))
    shard_sizes = w1[:, :k].size + w1.T[:k, :].size  # W1 column block + W2 row block
    assert tp_mlp.mlp_weight_params_per_rank(d, d_ff, tp, "gelu") == shard_sizes
    assert tp_mlp.mlp_weight_params_per_rank(d, d_ff, tp, "swiglu") == shard_sizes + d * k


def test_invalid_inputs_name_the_fix():
    with pytest.raises(ValueError, match="tp >= 1"):
        tp_mlp.block_column_row(0)
    with pytest.raises(ValueError, match="tp >= 1"):
        tp_mlp.explicit_column_row(-2)
    with pytest.raises(ValueError, match="'gelu' or 'swiglu'"):
        tp_mlp.explicit_column_row(2, activation="relu")
    with pytest.raises(ValueError, match="d >= 1"):
        tp_mlp.explicit_column_row(2, d=0)
    with pytest.raises(ValueError, match="'gelu' or 'swiglu'"):
        tp_mlp.mlp_flops_per_rank(1, 1, 1, 1, "geglu")


def test_gelu_tanh_matches_its_formula_and_is_not_additive():
    v = 0.7
    want = 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)))
    assert float(tp_mlp.gelu_tanh(sp.Float(v))) == pytest.approx(want, rel=1e-14)
    _, at0 = tp_mlp.second_mixed_derivative_of_defect(tp_mlp.gelu_tanh)
    assert sp.simplify(at0 - sp.sqrt(2 / sp.pi)) == 0
