"""SymPy forms of tensor parallelism's costs: activation memory, communication, decode time.

Symbols follow Korthikanti et al. 2022: ``s`` sequence, ``b`` microbatch, ``h`` hidden size,
``a`` heads, ``t`` TP degree, ``L`` layers; ``e`` bytes per element, ``f`` = d_ff,
``k`` = KV heads held per rank. The numeric twins live in :mod:`tpp.costs` and :mod:`tpp.serving`;
the tests assert that both agree.
"""

from __future__ import annotations

import sympy as sp

from tpp.symbolic import collectives as _coll

__all__ = [
    "s", "b", "h", "a", "t", "L", "e", "f", "k", "N", "B_mem", "B_link", "alpha",
    "korthikanti", "activation_terms", "activation_sum",
    "ring_factor", "tp_bytes_per_layer", "tp_bytes_per_step", "sp_equals_tp",
    "decode_step_time", "decode_crossover_bandwidth",
]

s, b, h, a, t, L, e, f, k, N = sp.symbols("s b h a t L e f k N", positive=True)
B_mem, B_link, alpha = sp.symbols("B_mem B_link alpha", positive=True)
batch = sp.Symbol("B", positive=True)


def korthikanti(scheme: str = "none", recompute: str = "none") -> sp.Expr:
    """Activation bytes per layer, Korthikanti et al. 2022 eqs. (1)-(3) / Table 2.

    scheme "none": ``sbh(34 + 5as/h)``; "tp": ``sbh(10 + 24/t + 5as/(ht))``;
    "tp_sp": ``sbh/t (34 + 5as/h)``; recompute "selective" drops the ``5as/h`` term,
    "full" keeps only ``2sbh`` (``/t`` under SP).
    """
    if scheme not in ("none", "tp", "tp_sp"):
        raise ValueError(f"scheme={scheme!r}: use 'none', 'tp' or 'tp_sp'")
    if recompute not in ("none", "selective", "full"):
        raise ValueError(f"recompute={recompute!r}: use 'none', 'selective' or 'full'")
    attn = 5 * a * s / h if recompute == "none" else 0
    if recompute == "full":
        return 2 * s * b * h / (t if scheme == "tp_sp" else 1)
    if scheme == "none":
        return s * b * h * (34 + attn)
    if scheme == "tp":
        return s * b * h * (10 + 24 / t + attn / t)
    return s * b * h / t * (34 + attn)


def activation_terms(sp_on: bool = False, recompute: str = "none", tp: bool = True,
                     d_ff: sp.Expr | None = None, kv_width: sp.Expr | None = None
                     ) -> dict[str, sp.Expr]:
    """The tensors kept per layer, symbolically (2-byte activations, 1-byte masks).

    ``tp=False`` sets t = 1. ``d_ff`` defaults to ``4h``; ``kv_width`` (width of K on one rank)
    defaults to ``h/t`` (MHA). Names match :func:`tpp.costs.memory.activation_terms_per_layer`.
    """
    tt = t if tp else sp.Integer(1)
    ff = 4 * h if d_ff is None else d_ff
    kv = h / tt if kv_width is None else kv_width
    rows = s / tt if sp_on else s
    if recompute == "full":
        return {"layer_input": 2 * rows * b * h}
    terms = {
        "ln1_input": 2 * rows * b * h,
        "qkv_input": 2 * rows * b * h,
        "q": 2 * s * b * h / tt,
        "k": 2 * s * b * kv,
        "v": 2 * s * b * kv,
        "softmax_output": 2 * a * s**2 * b / tt,
        "softmax_dropout_mask": a * s**2 * b / tt,
        "softmax_dropout_output": 2 * a * s**2 * b / tt,
        "attn_proj_input": 2 * s * b * h / tt,
        "attn_dropout_mask": rows * b * h,
        "ln2_input": 2 * rows * b * h,
        "fc1_input": 2 * rows * b * h,
        "gelu_input": 2 * s * b * ff / tt,
        "fc2_input": 2 * s * b * ff / tt,
        "mlp_dropout_mask": rows * b * h,
    }
    if recompute == "selective":
        for key in ("softmax_output", "softmax_dropout_mask", "softmax_dropout_output"):
            del terms[key]
    elif recompute != "none":
        raise ValueError(f"recompute={recompute!r}: use 'none', 'selective' or 'full'")
    return terms


def activation_sum(sp_on: bool = False, recompute: str = "none", tp: bool = True) -> sp.Expr:
    """Sum of :func:`activation_terms`; equals :func:`korthikanti` (asserted by the tests)."""
    return sp.simplify(sum(activation_terms(sp_on, recompute, tp).values()))


def ring_factor(op: str = "all_reduce", n: sp.Expr = t) -> sp.Expr:
    """Bytes sent per payload byte: all_reduce ``2(n-1)/n``, reduce_scatter/all_gather
    ``(n-1)/n`` (the ring derivation of :func:`tpp.symbolic.collectives.ring_factor`, in ``n``)."""
    return _coll.ring_factor(op).subs(_coll.N, n)


def tp_bytes_per_layer(phase: str = "step", sp_on: bool = False) -> sp.Expr:
    """Bytes one rank sends per layer: ``n_AR * 2(t-1)/t * b s h e`` (TP), or the RS + AG pairs
    under SP (without the backward re-gather)."""
    n = {"forward": 2, "backward": 2, "step": 4}.get(phase)
    if n is None:
        raise ValueError(f"phase={phase!r}: use 'forward', 'backward' or 'step'")
    payload = b * s * h * e
    if sp_on:
        return n * (ring_factor("reduce_scatter") + ring_factor("all_gather")) * payload
    return n * ring_factor("all_reduce") * payload


def tp_bytes_per_step(sp_on: bool = False) -> sp.Expr:
    """Bytes one rank sends for TP in a training step of ``L`` layers: ``8 L (t-1)/t b s h e``."""
    return L * tp_bytes_per_layer("step", sp_on)


def sp_equals_tp() -> sp.Expr:
    """``RS(t) + AG(t) - AR(t)`` bus factors; simplifies to 0 (SP moves TP's bytes)."""
    return sp.simplify(ring_factor("reduce_scatter") + ring_factor("all_gather")
                       - ring_factor("all_reduce"))


def decode_step_time(n_ar_per_layer: int = 2, latency: bool = False) -> sp.Expr:
    """Decode step time ``N e / (t B_mem) + 2 L (2(t-1)/t) B h e / B_link [+ 2L 2(t-1) alpha]``.

    ``N`` parameters, ``B`` batch (symbol ``B``), ``h`` = d_model.
    """
    work = N * e / (t * B_mem)
    comm = n_ar_per_layer * L * ring_factor("all_reduce") * batch * h * e / B_link
    steps = _coll.ring_steps("all_reduce").subs(_coll.N, t)
    lat = n_ar_per_layer * L * steps * alpha if latency else 0
    return work + comm + lat


def decode_crossover_bandwidth(t_low: int, t_high: int) -> sp.Expr:
    """The ``B_link`` at which TP ``t_high`` and ``t_low`` decode equally fast (no latency)."""
    expr = decode_step_time()
    sol = sp.solve(sp.Eq(expr.subs(t, t_low), expr.subs(t, t_high)), B_link)
    if len(sol) != 1:
        raise ValueError(f"no unique crossover between TP={t_low} and TP={t_high}")
    return sp.simplify(sol[0])
