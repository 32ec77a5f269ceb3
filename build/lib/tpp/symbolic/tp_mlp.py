"""SymPy derivations for the tensor-parallel MLP (Shoeybi et al. 2019, section 3, Fig. 3a).

Convention: row vectors, as in the rest of ``tpp``. Activations ``X`` are ``(n, d)``; the MLP is

    Y = sigma(X W1) W2,            W1: (d, d_ff), W2: (d_ff, d)                 (GELU MLP)
    Y = (silu(X W1) * (X W3)) W2,  W1, W3: (d, d_ff), W2: (d_ff, d)             (SwiGLU MLP)

Column-then-row sharding over ``T`` ranks splits ``W1 = [W1^(1) ... W1^(T)]`` (and ``W3``) along
the output (last) axis and ``W2`` along its input (first) axis into the matching row blocks, so

    Y = sum_t sigma(X W1^(t)) W2^(t)

Shoeybi et al.'s eq. (3) is only the first half, the column split
``[Y_1, Y_2] = [GeLU(X A_1), GeLU(X A_2)]``; the sum over shards is the row-parallel second GEMM
that the text after eq. (3) and Fig. 3a describe (its partial sums are added by ``g``'s
all-reduce).

The functions below build these expressions (block form with ``MatrixSymbol`` and explicit
entries with a generic, undefined element-wise ``sigma``), so the chapters can display them and
the tests can assert them.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

__all__ = [
    "BlockDerivation",
    "ExplicitDerivation",
    "additivity_defect",
    "block_column_row",
    "block_row_column_preactivation",
    "explicit_column_row",
    "gelu_erf",
    "gelu_tanh",
    "mlp_flops_per_rank",
    "mlp_weight_params_per_rank",
    "second_mixed_derivative_of_defect",
    "silu",
]


def _check_tp(tp: int) -> None:
    if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
        raise ValueError(f"tp={tp!r} must be a positive integer: pass tp >= 1")


def gelu_erf(x: sp.Expr) -> sp.Expr:
    """Exact GELU (Hendrycks & Gimpel 2016): ``x * Phi(x) = x/2 * (1 + erf(x / sqrt(2)))``."""
    return x / 2 * (1 + sp.erf(x / sp.sqrt(2)))


def silu(x: sp.Expr) -> sp.Expr:
    """SiLU (swish with beta = 1), the gate of SwiGLU (Shazeer 2020): ``x / (1 + exp(-x))``."""
    return x / (1 + sp.exp(-x))


@dataclass(frozen=True)
class BlockDerivation:
    """Column-then-row sharding in block form.

    ``pre_activation`` is ``X [W1^(1) ... W1^(T)]`` collapsed to the row of blocks
    ``[X W1^(1) ... X W1^(T)]``; ``output`` is ``[H^(1) ... H^(T)] [W2^(1); ...; W2^(T)]``
    collapsed to ``sum_t H^(t) W2^(t)`` where ``H^(t) = sigma(X W1^(t))`` is rank t's block of the
    hidden activation (element-wise ``sigma`` maps a row of blocks to the row of their images).
    ``expected_output`` is that sum written out by hand, for comparison.
    """

    tp: int
    pre_activation: sp.Expr
    output: sp.Expr
    expected_output: sp.Expr


def block_column_row(tp: int) -> BlockDerivation:
    """Block-matrix form of the column-then-row MLP for ``tp`` ranks (symbolic sizes n, d, k).

    ``W1^(t)`` is ``(d, k)`` and ``W2^(t)`` is ``(k, d)`` with ``k = d_ff / T``; the result is
    ``Y = sum_{t=1}^{T} sigma(X W1^(t)) W2^(t)``, the row-parallel second GEMM of Shoeybi et
    al. 2019, Fig. 3a (their eq. (3) is only the column split of the first GEMM).
    """
    _check_tp(tp)
    n, d, k = sp.symbols("n d k", positive=True, integer=True)
    x = sp.MatrixSymbol("X", n, d)
    w1 = [sp.MatrixSymbol(f"W_1^{{({t})}}", d, k) for t in range(1, tp + 1)]
    h = [sp.MatrixSymbol(f"H^{{({t})}}", n, k) for t in range(1, tp + 1)]
    w2 = [sp.MatrixSymbol(f"W_2^{{({t})}}", k, d) for t in range(1, tp + 1)]
    if tp == 1:
        pre = x * w1[0]
        out = h[0] * w2[0]
    else:
        pre = sp.block_collapse(x * sp.BlockMatrix([w1]))
        out = sp.block_collapse(sp.BlockMatrix([h]) * sp.BlockMatrix([[b] for b in w2]))
    expected = sp.Add(*[hb * wb for hb, wb in zip(h, w2, strict=True)])
    return BlockDerivation(tp=tp, pre_activation=pre, output=out, expected_output=expected)


def block_row_column_preactivation(tp: int) -> tuple[sp.Expr, sp.Expr]:
    """Row-then-column: splitting W1 along its INPUT axis makes the pre-activation a sum.

    With ``X = [X^(1) ... X^(T)]`` (columns) and ``W1 = [W1^(1); ...; W1^(T)]`` (rows),
    ``X W1 = sum_t X^(t) W1^(t)``: each rank holds one partial product, and the element-wise
    ``sigma`` must see the whole sum, so an all-reduce is needed BEFORE ``sigma``.
    Returns ``(collapsed, expected_sum)``.
    """
    _check_tp(tp)
    n, j, f = sp.symbols("n j f", positive=True, integer=True)
    xs = [sp.MatrixSymbol(f"X^{{({t})}}", n, j) for t in range(1, tp + 1)]
    ws = [sp.MatrixSymbol(f"W_1^{{({t})}}", j, f) for t in range(1, tp + 1)]
    if tp == 1:
        collapsed = xs[0] * ws[0]
    else:
        collapsed = sp.block_collapse(sp.BlockMatrix([xs]) * sp.BlockMatrix([[w] for w in ws]))
    expected = sp.Add(*[xb * wb for xb, wb in zip(xs, ws, strict=True)])
    return collapsed, expected


@dataclass(frozen=True)
class ExplicitDerivation:
    """Column-then-row sharding with explicit symbolic entries and a generic element-wise sigma.

    ``unsharded`` is the reference MLP, ``partials[t]`` is rank t's partial output and
    ``difference = unsharded - sum(partials)`` (expanded), which is the zero matrix.
    """

    tp: int
    activation: str
    x: sp.Matrix
    w1: sp.Matrix
    w2: sp.Matrix
    w3: sp.Matrix | None
    unsharded: sp.Matrix
    partials: tuple[sp.Matrix, ...]
    difference: sp.Matrix


def _mat(name: str, rows: int, cols: int) -> sp.Matrix:
    return sp.Matrix(rows, cols, lambda i, j: sp.Symbol(f"{name}_{{{i + 1}{j + 1}}}"))


def explicit_column_row(
    tp: int, n: int = 1, d: int = 2, k: int = 1, activation: str = "gelu"
) -> ExplicitDerivation:
    """Entry-by-entry check of ``Y = sum_t sigma(X W1^(t)) W2^(t)`` for any element-wise sigma.

    ``sigma`` is an undefined SymPy function, so the identity holds for every element-wise
    activation (GELU, SiLU, ReLU...). ``activation="swiglu"`` uses
    ``Y = (sigma(X W1) * (X W3)) W2`` with ``W3`` column-sharded like ``W1``.
    Sizes: X (n, d), W1 (d, T k), W2 (T k, d); keep them small (a few symbols each).
    """
    _check_tp(tp)
    if activation not in ("gelu", "swiglu"):
        raise ValueError(f"activation={activation!r} is unknown: use 'gelu' or 'swiglu'")
    for name, v in (("n", n), ("d", d), ("k", k)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}={v!r} must be a positive integer: pass {name} >= 1")
    sigma = sp.Function("sigma")
    d_ff = tp * k
    x = _mat("x", n, d)
    w1 = _mat("a", d, d_ff)
    w2 = _mat("b", d_ff, d)
    w3 = _mat("c", d, d_ff) if activation == "swiglu" else None

    def hidden(cols: slice) -> sp.Matrix:
        h = (x * w1[:, cols]).applyfunc(sigma)
        if w3 is not None:
            h = h.multiply_elementwise(x * w3[:, cols])
        return h

    unsharded = hidden(slice(0, d_ff)) * w2
    partials = tuple(
        hidden(slice(t * k, (t + 1) * k)) * w2[t * k : (t + 1) * k, :] for t in range(tp)
    )
    total = partials[0]
    for p in partials[1:]:
        total = total + p
    difference = (unsharded - total).applyfunc(sp.expand)
    return ExplicitDerivation(
        tp=tp,
        activation=activation,
        x=x,
        w1=w1,
        w2=w2,
        w3=w3,
        unsharded=unsharded,
        partials=partials,
        difference=difference,
    )


def additivity_defect(fn, a: sp.Expr, b: sp.Expr) -> sp.Expr:
    """``fn(a + b) - fn(a) - fn(b)``: zero for all a, b only if fn is additive (linear).

    A non-zero value is the error a rank would make by applying the activation to its partial
    pre-activation instead of to the all-reduced sum (row-then-column sharding without the
    extra all-reduce).
    """
    return fn(a + b) - fn(a) - fn(b)


def second_mixed_derivative_of_defect(fn) -> tuple[sp.Expr, sp.Expr]:
    """``d^2/(da db) [fn(a+b) - fn(a) - fn(b)] = fn''(a+b)``.

    If the defect vanished for all a, b this derivative would vanish, forcing ``fn'' = 0``, i.e.
    ``fn`` affine (and ``fn(0) = 0`` from a = b = 0, so linear). Returns the derivative as an
    expression in ``(a, b)`` and its value at ``a = b = 0``; for GELU the latter is
    ``sqrt(2/pi) != 0``.
    """
    a, b = sp.symbols("a b", real=True)
    mixed = sp.diff(additivity_defect(fn, a, b), a, b)
    return mixed, sp.simplify(mixed.subs({a: 0, b: 0}))


def mlp_flops_per_rank(
    n: sp.Expr, d: sp.Expr, d_ff: sp.Expr, tp: sp.Expr, activation: str = "gelu"
) -> sp.Expr:
    """Matmul FLOPs of one MLP forward on one rank (2 FLOPs per multiply-add).

    GELU: two matmuls ``(n, d) x (d, d_ff/T)`` and ``(n, d_ff/T) x (d_ff/T, d)``:
    ``4 n d d_ff / T``. SwiGLU adds ``X W3``: ``6 n d d_ff / T``. Element-wise work (activation,
    gating) is O(n d_ff / T) and left out.
    """
    if activation not in ("gelu", "swiglu"):
        raise ValueError(f"activation={activation!r} is unknown: use 'gelu' or 'swiglu'")
    n_mats = 2 if activation == "gelu" else 3
    return sp.Integer(2) * n_mats * n * d * d_ff / tp


def mlp_weight_params_per_rank(
    d: sp.Expr, d_ff: sp.Expr, tp: sp.Expr, activation: str = "gelu"
) -> sp.Expr:
    """Weights each rank stores: ``2 d d_ff / T`` (GELU) or ``3 d d_ff / T`` (SwiGLU), no biases."""
    if activation not in ("gelu", "swiglu"):
        raise ValueError(f"activation={activation!r} is unknown: use 'gelu' or 'swiglu'")
    n_mats = 2 if activation == "gelu" else 3
    return sp.Integer(n_mats) * d * d_ff / tp


def gelu_tanh(x: sp.Expr) -> sp.Expr:
    """GELU, tanh approximation (the one ``tpp.tensor_parallel`` uses, as Megatron-LM does):
    ``x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))`` with 0.044715 as an exact rational."""
    k = sp.Rational(44715, 10**6)
    return x / 2 * (1 + sp.tanh(sp.sqrt(2 / sp.pi) * (x + k * x**3)))
