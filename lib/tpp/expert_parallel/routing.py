"""Routing of a mixture-of-experts layer: which experts each token picks, and where its rows go.

Top-k routing (Shazeer et al. 2017; GShard, Lepikhin et al. 2021, Sec. 2.2): the ``top_k``
largest router logits, gates = softmax over them. Under EP each rank holds a contiguous block of
the tokens (:func:`token_bounds`, ``torch.tensor_split``'s rule) and ``E / ep`` experts; with a
capacity factor each rank gives every expert ``C`` slots (:func:`expert_capacity`) and the rows
past them are dropped (:func:`capacity_keep`, GShard Alg. 1); :func:`dispatch_rows` counts the
rows each rank sends to each rank. The layer that moves them is :mod:`tpp.expert_parallel.moe`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["Routing", "route", "token_bounds", "expert_capacity", "capacity_keep",
           "dispatch_rows"]


@dataclass(frozen=True)
class Routing:
    """``experts`` (T, top_k): chosen experts, best first; ``gates`` (T, top_k): their weights."""

    experts: np.ndarray
    gates: np.ndarray


def _check_int(value, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name}={value!r} must be an integer >= {minimum}")
    return int(value)


def route(x, router_w, top_k: int = 2) -> Routing:
    """Top-k routing: the ``top_k`` largest logits (ties to the lower expert index), gates =
    softmax over the selected logits."""
    x, router_w = np.asarray(x, dtype=np.float64), np.asarray(router_w, dtype=np.float64)
    top_k = _check_int(top_k, "top_k")
    if x.ndim != 2 or router_w.ndim != 2 or router_w.shape[0] != x.shape[1]:
        raise ValueError(f"x {x.shape} and router_w {router_w.shape}: pass (T, d) and (d, E)")
    if top_k > router_w.shape[1]:
        raise ValueError(f"top_k={top_k} > n_experts={router_w.shape[1]}: choose top_k <= "
                         f"{router_w.shape[1]}")
    logits = x @ router_w
    experts = np.argsort(-logits, axis=1, kind="stable")[:, :top_k]
    sel = np.take_along_axis(logits, experts, axis=1)
    g = np.exp(sel - sel.max(axis=1, keepdims=True))
    return Routing(experts, g / g.sum(axis=1, keepdims=True))


def expert_capacity(tokens_per_rank: int, n_experts: int, top_k: int,
                    capacity_factor: float) -> int:
    """Slots each rank gives each expert: ``ceil(cf * tokens_per_rank * top_k / n_experts)``."""
    _check_int(tokens_per_rank, "tokens_per_rank")
    _check_int(n_experts, "n_experts")
    _check_int(top_k, "top_k")
    if not capacity_factor > 0:
        raise ValueError(f"capacity_factor={capacity_factor!r} must be > 0 (e.g. 1.25), or "
                         "None for dropless routing")
    return math.ceil(capacity_factor * tokens_per_rank * top_k / n_experts)


def token_bounds(tokens: int, ep: int) -> tuple[int, ...]:
    """Rank ``r`` holds tokens ``[b[r], b[r+1])``: blocks of ``ceil(T/ep)`` for the first
    ``T mod ep`` ranks and ``floor(T/ep)`` for the rest (``torch.tensor_split``'s rule)."""
    _check_int(tokens, "tokens", 0)
    _check_int(ep, "ep")
    q, rem = divmod(tokens, ep)
    bounds = [0]
    for r in range(ep):
        bounds.append(bounds[-1] + q + (1 if r < rem else 0))
    return tuple(bounds)


def capacity_keep(experts: np.ndarray, ep: int, n_experts: int, capacity: int) -> np.ndarray:
    """Which (token, slot) rows fit: per rank's token block and expert, the first ``capacity``
    rows, first choices before second choices, then in token order (GShard Alg. 1)."""
    experts = np.asarray(experts)
    t, k = experts.shape
    b = token_bounds(t, ep)
    keep = np.zeros(experts.shape, dtype=bool)
    for r in range(ep):
        used = np.zeros(n_experts, dtype=int)
        for j in range(k):
            for tok in range(b[r], b[r + 1]):
                e = experts[tok, j]
                if used[e] < capacity:
                    keep[tok, j] = True
                    used[e] += 1
    return keep


def dispatch_rows(experts: np.ndarray, ep: int, n_experts: int,
                  keep: np.ndarray | None = None) -> np.ndarray:
    """``rows[r, j]``: (token, expert) rows rank ``r``'s tokens send to rank ``j``'s experts."""
    experts = np.asarray(experts)
    b = token_bounds(experts.shape[0], ep)
    el = n_experts // ep
    rows = np.zeros((ep, ep), dtype=int)
    kept = np.ones(experts.shape, dtype=bool) if keep is None else keep
    for r in range(ep):
        blk = experts[b[r]:b[r + 1]][kept[b[r]:b[r + 1]]]
        rows[r] = np.bincount(blk // el, minlength=ep)
    return rows
