"""Exposed communication of a bucketed gradient all-reduce behind a backward, derived (SymPy).

The case: a backward of ``L`` equal layers, ``t_b`` seconds each; gradients go into buckets of
``q`` layers (``n_b = L / q`` buckets), and each bucket's all-reduce takes ``t_c`` seconds on the
link (:func:`bucket_time`: the ring's alpha-beta time from :mod:`tpp.collectives`). While a
collective runs, compute progresses at rate ``1 - sigma`` (SM contention). Time 0 is the start of
the backward.

The timeline's events obey two recurrences (bucket ``j = 1..n_b``):

* ``r_j``: the end of the backward of bucket ``j``'s last layer (the bucket is ready);
* ``e_j = max(r_j, e_{j-1}) + t_c``: its all-reduce starts when it is ready and the link is
  free (the previous bucket's all-reduce has ended), and lasts ``t_c``.

Which argument of the ``max`` wins depends on one comparison, the same for every ``j``:

* compute-bound, ``(1 - sigma) t_c <= q t_b``: each all-reduce ends before the next bucket is
  ready, so ``e_j = r_j + t_c``; bucket ``j+1``'s compute runs slowed during all of ``t_c``
  (doing ``(1 - sigma) t_c`` of its work), then at full speed:
  ``r_{j+1} = r_j + q t_b + sigma t_c``;
* link-bound, ``(1 - sigma) t_c >= q t_b``: the link never waits after the first bucket,
  ``e_j = e_{j-1} + t_c``, ``e_1 = q t_b + t_c``, and the backward runs slowed from ``r_1`` on.

:func:`derive_bucketed_exposure` solves both recurrences with :func:`sympy.rsolve`, checks each
regime's assumption (``e_j <= r_{j+1}``, resp. ``r_j <= e_{j-1}``) symbolically, and returns the
step ``e_B`` and the exposed time ``e_B - L t_b`` (waiting plus the contention's stretch), with
``Max`` joining the regimes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import sympy as sp

from tpp.collectives import bus_factor, ring_steps

__all__ = ["BucketedExposure", "FSDPForwardExposure", "derive_bucketed_exposure",
           "derive_fsdp_forward_exposure", "bucket_time", "exposed_numeric"]

L, q, t_b, t_c, sigma, j = sp.symbols("L q t_b t_c sigma j", positive=True)
#: ``q``: layers per bucket; the number of buckets is ``n_b = L / q`` (the course's ``B`` and
#: ``k`` name the batch size and the experts per token; see the notation appendix).


@dataclass(frozen=True)
class BucketedExposure:
    """The derivation's results (SymPy expressions in ``L, q, t_b, t_c, sigma``)."""

    ready: sp.Expr             # r_j, compute-bound regime
    end_compute_bound: sp.Expr  # e_j, compute-bound regime
    end_link_bound: sp.Expr     # e_j, link-bound regime
    step_compute_bound: sp.Expr  # e_B
    step_link_bound: sp.Expr
    step: sp.Expr               # Max of the two (the regimes' boundary is where they meet)
    exposed: sp.Expr            # step - L t_b
    gap_compute_bound: sp.Expr  # r_{j+1} - e_j (>= 0 is the regime's assumption)
    gap_link_bound: sp.Expr     # e_{j-1} - r_j (>= 0 is the regime's assumption)


@lru_cache(maxsize=1)
def derive_bucketed_exposure() -> BucketedExposure:
    """Solve the event recurrences of the module docstring; return both regimes and the joint
    step and exposed time, with ``n_b = L / q``."""
    r, e = sp.Function("r"), sp.Function("e")
    # compute-bound: r_{j+1} = r_j + q t_b + sigma t_c, r_1 = q t_b; e_j = r_j + t_c
    r_j = sp.rsolve(r(j + 1) - r(j) - q * t_b - sigma * t_c, r(j), {r(1): q * t_b})
    e_cb = r_j + t_c
    gap_cb = sp.factor(r_j.subs(j, j + 1) - e_cb)         # r_{j+1} - e_j
    # link-bound: e_j = e_{j-1} + t_c, e_1 = q t_b + t_c; r_j = q t_b + (j-1) q t_b / (1-sigma)
    e_lb = sp.rsolve(e(j + 1) - e(j) - t_c, e(j), {e(1): q * t_b + t_c})
    r_lb = sp.rsolve(r(j + 1) - r(j) - q * t_b / (1 - sigma), r(j), {r(1): q * t_b})
    gap_lb = sp.factor(e_lb.subs(j, j - 1) - r_lb)         # e_{j-1} - r_j
    nb = L / q
    step_cb = sp.expand(e_cb.subs(j, nb))
    step_lb = sp.expand(e_lb.subs(j, nb))
    # link-bound: the backward ends first, r_{n_b} <= e_{n_b - 1} < e_{n_b}
    step = sp.Max(step_cb, step_lb)
    return BucketedExposure(r_j, e_cb, e_lb, step_cb, step_lb, step,
                            sp.Max(sp.expand(step_cb - L * t_b), sp.expand(step_lb - L * t_b)),
                            gap_cb, gap_lb)


def bucket_time(n: int, bucket_bytes, alpha, beta) -> sp.Expr:
    """``t_c`` of one bucket: ring all-reduce over ``n`` ranks, ``steps alpha + factor M / beta``
    with the step count and bus factor of :mod:`tpp.collectives` (no second copy of them)."""
    return ring_steps("all_reduce", n) * alpha \
        + sp.Rational(bus_factor("all_reduce", n)) * bucket_bytes / beta


def exposed_numeric(n_layers: int, layers_per_bucket: int, tb: float, tc: float,
                    contention: float = 0.0) -> float:
    """The derived exposed time evaluated at numbers (``layers_per_bucket`` must divide
    ``n_layers``)."""
    if n_layers % layers_per_bucket:
        raise ValueError(f"layers_per_bucket={layers_per_bucket} must divide n_layers="
                         f"{n_layers} for the closed form (the timeline handles any split)")
    return float(_exposed_function()(n_layers, layers_per_bucket, tb, tc, contention))


@lru_cache(maxsize=1)
def _exposed_function():
    """The derived exposed time as a plain Python function of ``(L, q, t_b, t_c, sigma)``."""
    return sp.lambdify((L, q, t_b, t_c, sigma), derive_bucketed_exposure().exposed, "math")


t_g, t_f = sp.symbols("t_g t_f", positive=True)


@dataclass(frozen=True)
class FSDPForwardExposure:
    """FSDP's forward with one-layer prefetch, no contention (expressions in ``L, t_g, t_f``)."""

    start_compute_bound: sp.Expr  # s_i, start of layer i's forward when t_g <= t_f
    start_link_bound: sp.Expr     # s_i when t_g >= t_f
    gap_compute_bound: sp.Expr    # s_{i+1} - (end of gather i+1) >= 0 is the assumption
    gap_link_bound: sp.Expr       # (end of gather i) - (end of layer i-1) >= 0
    exposed: sp.Expr              # end of the forward - L t_f


@lru_cache(maxsize=1)
def derive_fsdp_forward_exposure() -> FSDPForwardExposure:
    """Exposed all-gather time of a forward of ``L`` equal layers (``t_f`` each) whose weights
    FSDP gathers (``t_g`` each) one layer ahead, on a link of their own, ``sigma = 0``.

    Events (layer ``i = 1..L``): the gather of layer ``i`` starts when the link is free and layer
    ``i-1``'s forward has started (prefetch depth 1), ``a_i = max(a_{i-1} + t_g, s_{i-1})``, and
    ends at ``a_i + t_g``; layer ``i``'s forward starts when layer ``i-1``'s has ended and its
    gather has, ``s_i = max(s_{i-1} + t_f, a_i + t_g)``, with ``a_1 = 0``, ``s_1 = t_g``.
    Compute-bound (``t_g <= t_f``): ``s_{i+1} = s_i + t_f``; link-bound: ``s_{i+1} = s_i + t_g``
    (then ``a_{i+1} = a_i + t_g = s_i``). Solved with :func:`sympy.rsolve`; the exposed time is
    ``s_L + t_f - L t_f``.
    """
    i = sp.symbols("i", positive=True, integer=True)
    s = sp.Function("s")
    s_cb = sp.rsolve(s(i + 1) - s(i) - t_f, s(i), {s(1): t_g})
    s_lb = sp.rsolve(s(i + 1) - s(i) - t_g, s(i), {s(1): t_g})
    # compute-bound: gather i+1 starts at s_i (the link is free: gather i ended at a_i + t_g <=
    # s_i) and must end before s_i + t_f
    gap_cb = sp.factor(s_cb.subs(i, i + 1) - (s_cb + t_g))
    # link-bound: gather i ends at i t_g = s_i, after layer i-1 ends at s_{i-1} + t_f
    gap_lb = sp.factor(i * t_g - (s_lb.subs(i, i - 1) + t_f))
    exposed = sp.Max(sp.expand(s_cb.subs(i, L) + t_f - L * t_f),
                     sp.expand(s_lb.subs(i, L) + t_f - L * t_f))
    return FSDPForwardExposure(s_cb, s_lb, gap_cb, gap_lb, exposed)
