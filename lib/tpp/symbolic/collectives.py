"""SymPy derivations of the ring collectives' costs (Patarasuk & Yuan 2009; NCCL tests).

Symbols: ``N`` ranks (positive integer), ``V`` payload bytes (positive; ``M`` is an alias kept
for old code, the course keeps M for the number of microbatches), ``alpha`` latency per
step (seconds), ``beta`` bandwidth per direction (bytes/s; ``B`` is an alias kept for old code,
the course's notation is beta), ``j`` the step index (``s`` is an alias kept for old code;
the course keeps s for the sequence length).

The derivation sums what one rank sends, step by step:

* reduce-scatter phase: steps j = 0..N-2, one chunk of V/N bytes each:
  ``Sum(V/N, (j, 0, N-2)) = (N-1) V / N``;
* all-gather phase: the same, ``(N-1) V / N``;
* all-reduce = reduce-scatter + all-gather: ``2 (N-1) V / N``, in 2(N-1) steps;
* alpha-beta time: ``steps * alpha + bytes_per_rank / beta``.

Also, for the f/g chapter, :func:`copy_backward_is_sum` and :func:`sum_backward_is_copy` derive
from the chain rule that the backward of "copy x to T ranks" is a sum and vice versa.
"""

from __future__ import annotations

from functools import cache

import sympy as sp

__all__ = [
    "B",
    "beta",
    "M",
    "N",
    "V",
    "alpha",
    "j",
    "s",
    "all_gather_bytes_per_rank",
    "all_reduce_bytes_per_rank",
    "alpha_beta_time",
    "copy_backward_is_sum",
    "reduce_scatter_bytes_per_rank",
    "ring_factor",
    "ring_steps",
    "sum_backward_is_copy",
]

N = sp.Symbol("N", integer=True, positive=True)
V = sp.Symbol("V", positive=True)  # payload bytes (appendix_notation)
M = V  # alias: M is the number of microbatches in the course's notation
alpha = sp.Symbol("alpha", nonnegative=True)
beta = sp.Symbol("beta", positive=True)
B = beta  # alias: the course writes the link bandwidth as beta (appendix_notation)
j = sp.Symbol("j", integer=True, nonnegative=True)  # ring step index
s = j  # alias: s is the sequence length in the course's notation

_OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")


def _op(op: str) -> str:
    name = op.strip().lower().replace("-", "_")
    if name not in _OPS:
        raise ValueError(f"unknown op {op!r}: use one of {', '.join(_OPS)}")
    return name


def chunk_bytes() -> sp.Expr:
    """Size of one ring chunk: the payload cut into N equal pieces, ``V / N``."""
    return V / N


@cache  # derived once: SymPy expressions are immutable
def reduce_scatter_bytes_per_rank(unevaluated: bool = False) -> sp.Expr:
    """``Sum_{j=0}^{N-2} V/N = (N-1) V / N``: one chunk per step for N-1 steps."""
    expr = sp.Sum(chunk_bytes(), (j, 0, N - 2))
    return expr if unevaluated else sp.simplify(expr.doit())


@cache  # derived once: SymPy expressions are immutable
def all_gather_bytes_per_rank(unevaluated: bool = False) -> sp.Expr:
    """``Sum_{j=0}^{N-2} V/N = (N-1) V / N`` with V the gathered output size."""
    expr = sp.Sum(chunk_bytes(), (j, 0, N - 2))
    return expr if unevaluated else sp.simplify(expr.doit())


@cache  # derived once: SymPy expressions are immutable
def all_reduce_bytes_per_rank(unevaluated: bool = False) -> sp.Expr:
    """Reduce-scatter phase + all-gather phase: ``2 (N-1) V / N`` bytes sent by each rank."""
    expr = sp.Add(reduce_scatter_bytes_per_rank(True), all_gather_bytes_per_rank(True),
                  evaluate=False)
    return expr if unevaluated else sp.factor(sp.simplify(expr.doit()))


@cache  # derived once: SymPy expressions are immutable
def ring_steps(op: str) -> sp.Expr:
    """Sequential steps: all_reduce ``2 (N-1)``; reduce_scatter, all_gather, broadcast ``N-1``."""
    name = _op(op)
    one_phase = sp.Sum(1, (j, 0, N - 2)).doit()
    return sp.expand(2 * one_phase) if name == "all_reduce" else one_phase


@cache  # derived once: SymPy expressions are immutable
def bytes_per_rank(op: str) -> sp.Expr:
    """Bytes one rank sends (the busiest rank for broadcast: V)."""
    name = _op(op)
    if name == "all_reduce":
        return all_reduce_bytes_per_rank()
    if name == "reduce_scatter":
        return reduce_scatter_bytes_per_rank()
    if name == "all_gather":
        return all_gather_bytes_per_rank()
    return V


@cache  # derived once: SymPy expressions are immutable
def ring_factor(op: str = "all_reduce") -> sp.Expr:
    """Bus factor = bytes per rank / V: ``2(N-1)/N``, ``(N-1)/N``, ``(N-1)/N`` or 1."""
    return sp.factor(sp.simplify(bytes_per_rank(op) / V))


@cache  # derived once: SymPy expressions are immutable
def alpha_beta_time(op: str = "all_reduce") -> sp.Expr:
    """``T = steps * alpha + bytes_per_rank / beta``; all-reduce:
    ``2(N-1) alpha + 2(N-1)V/(N beta)``. A ring model: a bound that fits large messages (see
    :mod:`tpp.costs.algorithms` for tree, NVLS and one-shot all-reduces)."""
    return ring_steps(op) * alpha + bytes_per_rank(op) / beta


def copy_backward_is_sum(T: int) -> tuple[sp.Expr, sp.Expr]:
    """Chain rule for "copy x to T ranks": returns ``(dL/dx, sum_t dl_t/dy_t at y_t = x)``.

    With y_t = x for t = 1..T and L = sum_t l_t(y_t) (l_t arbitrary differentiable functions),
    dL/dx = sum_t (dl_t/dy_t)(dy_t/dx) = sum_t dl_t/dy_t. Both expressions are returned so
    the caller can display them and assert ``sp.simplify(a - b) == 0``.
    """
    if isinstance(T, bool) or not isinstance(T, int) or T < 1:
        raise ValueError(f"T={T!r} must be a positive integer number of ranks: use T >= 1")
    x = sp.Symbol("x")
    ys = sp.symbols(f"y_1:{T + 1}")
    ls = [sp.Function(f"l_{t + 1}") for t in range(T)]
    L_of_y = sum((l(y) for l, y in zip(ls, ys, strict=True)), sp.Integer(0))
    dL_dx = sp.diff(L_of_y.subs({y: x for y in ys}), x)
    incoming = [sp.diff(L_of_y, y) for y in ys]  # the gradient arriving on rank t
    summed = sum((g.subs(y, x) for g, y in zip(incoming, ys, strict=True)), sp.Integer(0))
    return dL_dx, summed


def sum_backward_is_copy(T: int) -> tuple[list[sp.Expr], sp.Expr]:
    """Chain rule for "y = sum_t z_t": every dL/dz_t equals dL/dy.

    Returns ``([dL/dz_1, ..., dL/dz_T], dL/dy)`` with L = l(y) for an arbitrary l.
    """
    if isinstance(T, bool) or not isinstance(T, int) or T < 1:
        raise ValueError(f"T={T!r} must be a positive integer number of ranks: use T >= 1")
    zs = sp.symbols(f"z_1:{T + 1}")
    y = sp.Symbol("y")
    l_fn = sp.Function("l")
    L = l_fn(sum(zs, sp.Integer(0)))
    grads = [sp.diff(L, z) for z in zs]
    dL_dy = sp.diff(l_fn(y), y).subs(y, sum(zs, sp.Integer(0)))
    return grads, dL_dy
