"""Expert parallelism: a mixture-of-experts MLP whose experts live on ``ep`` ranks.

The layer (Shazeer et al. 2017; GShard, Lepikhin et al. 2021, Sec. 2.2 and Alg. 1):
``logits = x W_router``; each token picks its ``top_k`` experts by logit; the gates are the
softmax over the selected logits; ``y_t = sum_{e in top_k(t)} gate_{t,e} gelu(x_t W1_e) W2_e``
(the library's tanh GELU, :func:`tpp.tensor_parallel.activations.gelu`).

Under EP each rank holds ``E / ep`` experts and a contiguous block of the tokens: ``T / ep``
when ``ep`` divides ``T``, otherwise the first ``T mod ep`` ranks hold one token more
(:func:`token_bounds`, the split of ``torch.tensor_split``), since a real dispatcher takes
whatever local token count each rank has (Megatron-LM's ``MoEAlltoAllTokenDispatcher`` exchanges
per-rank counts before its variable-size all-to-all). Instead of TP's all-reduce,
two all-to-alls move the tokens: **dispatch** sends each (token, expert) row to the rank that
owns the expert, **combine** sends the expert's output row back (GShard Alg. 1; Megatron-LM's
``MoEAlltoAllTokenDispatcher``).

* Dropless (``capacity_factor=None``): every rank sends exactly its routed rows, a
  variable-size all-to-all (``all_to_all_v``) recorded on the group's ledger with the bytes
  counted per rank.
* With a capacity factor: each rank gives every expert ``C = ceil(cf * T_max * top_k / E)``
  slots, ``T_max = ceil(T / ep)`` the largest rank's token count (one buffer shape for the
  fixed-size all-to-all); rows past ``C`` are dropped (first choices are served before
  second choices, then in token order, GShard Alg. 1) and **counted** in ``.dropped``; the
  buffers ``(E, C, d)`` are exchanged with the group's fixed-size
  :meth:`tpp.collectives.ProcessGroup.all_to_all`.

The ledger counts the activation rows; the routing metadata (one expert index per row, or the
per-rank counts an ``all_to_all_v`` exchanges first) is small and not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpp.collectives import CollectiveRecord, ProcessGroup, group_of_size
from tpp.expert_parallel.routing import (
    Routing,
    _check_int,
    capacity_keep,
    expert_capacity,
    route,
    token_bounds,
)
from tpp.tensor_parallel.activations import gelu

__all__ = ["MoEResult", "moe_reference", "moe_forward", "all_to_all_v"]


def _check_layer(x, router_w, w1, w2, top_k):
    x, router_w, w1, w2 = (np.asarray(a, dtype=np.float64) for a in (x, router_w, w1, w2))
    if x.ndim != 2:
        raise ValueError(f"x has shape {x.shape}: pass tokens as a 2-d array (tokens, d)")
    t, d = x.shape
    if router_w.ndim != 2 or router_w.shape[0] != d:
        raise ValueError(f"router_w has shape {router_w.shape}: pass (d={d}, n_experts)")
    e = router_w.shape[1]
    if w1.ndim != 3 or w1.shape[:2] != (e, d):
        raise ValueError(f"w1 has shape {w1.shape}: pass (n_experts={e}, d={d}, d_ff)")
    if w2.shape != (e, w1.shape[2], d):
        raise ValueError(f"w2 has shape {w2.shape}: pass (n_experts={e}, d_ff={w1.shape[2]}, "
                         f"d={d})")
    top_k = _check_int(top_k, "top_k")
    if top_k > e:
        raise ValueError(f"top_k={top_k} > n_experts={e}: choose top_k <= {e}")
    return x, router_w, w1, w2, top_k


def _expert(x: np.ndarray, w1: np.ndarray, w2: np.ndarray) -> np.ndarray:
    return gelu(x @ w1) @ w2


def moe_reference(x, router_w, w1, w2, top_k: int = 2,
                  keep: np.ndarray | None = None) -> np.ndarray:
    """Dense reference ``y_t = sum_e gate_{t,e} gelu(x_t W1_e) W2_e`` (dropped rows left out)."""
    x, router_w, w1, w2, top_k = _check_layer(x, router_w, w1, w2, top_k)
    rt = route(x, router_w, top_k)
    y = np.zeros_like(x)
    for tok in range(x.shape[0]):
        for j in range(top_k):
            if keep is None or keep[tok, j]:
                e = rt.experts[tok, j]
                y[tok] += rt.gates[tok, j] * _expert(x[tok:tok + 1], w1[e], w2[e])[0]
    return y


def all_to_all_v(group: ProcessGroup, pieces: list[list[np.ndarray]], *,
                 tag: str = "") -> list[list[np.ndarray]]:
    """Variable-size all-to-all: rank ``r`` sends ``pieces[r][j]`` to rank ``j``.

    Returns ``received[j][r] = pieces[r][j]``. The group's collective
    (:meth:`tpp.collectives.ProcessGroup.all_to_all_v`) moves the pieces and records the call on
    ``group.ledger`` as an ``all_to_all`` (``algorithm="pairwise-v"``, ``n - 1`` steps) with the
    bytes each rank sent to the others counted; ``payload_bytes`` is the largest rank's input.
    """
    if not isinstance(group, ProcessGroup):
        raise ValueError(f"all_to_all_v needs a tpp.collectives.ProcessGroup, got "
                         f"{type(group).__name__}")
    return group.all_to_all_v(pieces, tag=tag)


@dataclass
class MoEResult:
    """``output`` (T, d); ``ledger``; ``tokens_per_rank`` / ``tokens_per_expert``: rows the
    experts processed (padding not counted); ``local_tokens``: the tokens each rank held
    before the dispatch (:func:`token_bounds`; uneven when ``ep`` does not divide ``T``);
    ``dropped``: rows dropped for capacity (0 when dropless), ``dropped_per_expert``;
    ``capacity``: slots per expert per rank (None = dropless); ``routing`` and ``keep``: the
    decisions, for checking."""

    output: np.ndarray
    ledger: list[CollectiveRecord]
    tokens_per_rank: tuple[int, ...]
    tokens_per_expert: tuple[int, ...]
    dropped: int
    dropped_per_expert: tuple[int, ...]
    capacity: int | None
    routing: Routing
    keep: np.ndarray
    local_tokens: tuple[int, ...] = ()

    def bytes_sent_per_rank(self) -> tuple[int, ...]:
        totals = [0] * len(self.tokens_per_rank)
        for rec in self.ledger:
            for r, b in enumerate(rec.bytes_sent_per_rank):
                totals[r] += b
        return tuple(totals)


def moe_forward(x, router_w, w1, w2, ep: int, top_k: int = 2,
                capacity_factor: float | None = None,
                group: ProcessGroup | None = None) -> MoEResult:
    """MoE forward with experts on ``ep`` ranks, tokens dispatched and combined by all-to-all.

    Rank ``r`` holds tokens ``[b[r], b[r+1])`` of :func:`token_bounds` (any ``T``: the first
    ``T mod ep`` ranks hold one more) and experts ``[r E/ep, (r+1) E/ep)``.
    Ledger: two all-to-alls, tagged ``moe.dispatch`` and ``moe.combine``.
    """
    x, router_w, w1, w2, top_k = _check_layer(x, router_w, w1, w2, top_k)
    ep = _check_int(ep, "ep")
    t, d = x.shape
    n_exp = router_w.shape[1]
    if n_exp % ep:
        raise ValueError(f"n_experts={n_exp} is not divisible by ep={ep}: choose an ep that "
                         f"divides {n_exp} so that every rank holds the same number of experts")
    group = group_of_size(group, ep, label="ep", name="ep")
    start = len(group.ledger)
    bounds = token_bounds(t, ep)
    el = n_exp // ep
    rt = route(x, router_w, top_k)
    cap = None
    if capacity_factor is None:
        keep = np.ones(rt.experts.shape, dtype=bool)
    else:
        cap = expert_capacity(max(1, -(-t // ep)), n_exp, top_k, capacity_factor)
        keep = capacity_keep(rt.experts, ep, n_exp, cap)
    y = np.zeros_like(x)
    # each rank's rows, grouped by destination rank: (token, slot, expert)
    rows = [[[] for _ in range(ep)] for _ in range(ep)]
    for r in range(ep):
        for j in range(top_k):
            for tok in range(bounds[r], bounds[r + 1]):
                if keep[tok, j]:
                    e = int(rt.experts[tok, j])
                    rows[r][e // el].append((tok, j, e))
    if cap is None:
        send = [[x[[tok for tok, _, _ in rows[r][dst]]].reshape(-1, d) for dst in range(ep)]
                for r in range(ep)]
        recv = all_to_all_v(group, send, tag="moe.dispatch")
        outs = [[np.zeros((0, d)) for _ in range(ep)] for _ in range(ep)]
        for dst in range(ep):        # the program of rank dst: run its experts on what came in
            for src in range(ep):
                ex = np.array([e for _, _, e in rows[src][dst]], dtype=int)
                o = np.zeros_like(recv[dst][src])
                for e in np.unique(ex):
                    o[ex == e] = _expert(recv[dst][src][ex == e], w1[e], w2[e])
                outs[dst][src] = o
        back = all_to_all_v(group, outs, tag="moe.combine")
        for r in range(ep):
            for dst in range(ep):
                for (tok, j, _), row in zip(rows[r][dst], back[r][dst], strict=True):
                    y[tok] += rt.gates[tok, j] * row
    else:
        bufs, where = [], []
        for r in range(ep):          # (E, C, d) slots, zero padding where an expert has room
            buf, fill, loc = np.zeros((n_exp, cap, d)), np.zeros(n_exp, dtype=int), {}
            for dst in range(ep):
                for tok, j, e in rows[r][dst]:
                    buf[e, fill[e]] = x[tok]
                    loc[(tok, j)] = (e, fill[e])
                    fill[e] += 1
            bufs.append(buf)
            where.append(loc)
        recv = group.all_to_all(bufs, axis=0, tag="moe.dispatch")   # rank j: (ep*E/ep, C, d)
        outs = []
        for dst in range(ep):
            a = recv[dst].reshape(ep, el, cap, d)
            o = np.stack([_expert(a[:, i].reshape(-1, d), w1[dst * el + i], w2[dst * el + i])
                          .reshape(ep, cap, d) for i in range(el)], axis=1)
            outs.append(o.reshape(ep * el, cap, d))
        back = group.all_to_all(outs, axis=0, tag="moe.combine")     # rank r: (E, C, d)
        for r in range(ep):
            for (tok, j), (e, slot) in where[r].items():
                y[tok] += rt.gates[tok, j] * back[r][e, slot]
    per_expert = np.bincount(rt.experts[keep], minlength=n_exp)
    dropped = np.bincount(rt.experts[~keep], minlength=n_exp)
    per_rank = per_expert.reshape(ep, el).sum(axis=1)
    return MoEResult(y, list(group.ledger[start:]), tuple(int(v) for v in per_rank),
                     tuple(int(v) for v in per_expert), int(dropped.sum()),
                     tuple(int(v) for v in dropped), cap, rt, keep,
                     tuple(bounds[r + 1] - bounds[r] for r in range(ep)))
