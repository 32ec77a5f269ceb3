"""Exposed data-parallel communication of one pipeline rank, from the two-stream timeline of
:mod:`tpp.data_parallel.overlap` (the model of the chapter "Hiding communication"; no second
copy here).

The rank's layers (its chunks, in order) with their per-microbatch forward and backward times
(TP collectives included, blocking as in Megatron-LM) go to
:func:`tpp.data_parallel.overlap.step_timeline` with the ZeRO stage's
:class:`tpp.data_parallel.overlap.DPTraffic` on the
link the DP group crosses, at the link's bus bandwidth, in Megatron-LM's gradient buckets
(:func:`megatron_bucket_bytes`). What the step pays for DP is the
time the compute stream waited for it (``exposed["dp_grad"] + exposed["dp_param"]``) plus the
compute slowed while NCCL held SMs (``contention``).

Stages 0-1 communicate only around the first forward and the last backward of a step, so two
microbatches give their cost exactly; stages 2-3 repeat the same traffic every microbatch, so
the cost at ``M`` microbatches is extrapolated linearly from timelines of 3 and 4 (a periodic
steady state; the tests compare it with full timelines).

TP collectives, :func:`tp_layer_times`: one layer's forward (or backward) with its TP traffic
(:class:`tpp.data_parallel.overlap.TPTraffic`) on the same timeline: blocking (Megatron-LM's
default: compute, then the collective) or decomposed (``--tp-comm-overlap``, TransformerEngine's
userbuffers: the matmul cut into TP chunks, each chunk's share of the traffic behind the next,
the compute slowed by the timeline's contention while it runs, the last share exposed).
"""

from __future__ import annotations

from functools import lru_cache

from tpp import hardware
from tpp.data_parallel.overlap import DPTraffic, Link, TPTraffic, step_timeline

__all__ = ["dp_cost", "megatron_bucket_bytes", "tp_layer_times"]


def megatron_bucket_bytes(dp: int, bytes_per_grad: int = 2) -> int:
    """Megatron-LM's default gradient bucket: ``max(40e6, 1e6 x DP)`` parameters
    (NVIDIA/Megatron-LM, megatron/core/distributed/distributed_data_parallel.py: "make buckets
    larger to ensure that chunks used in NCCL ring-reduce implementations are large enough to
    remain bandwidth-bound rather than latency-bound")."""
    return bytes_per_grad * max(40_000_000, 1_000_000 * dp)


@lru_cache(maxsize=8192)
def _run(t_fwd: tuple, t_bwd: tuple, m: int, stage: int, n: int, layer_bytes: tuple,
         link: tuple, overlap: bool) -> tuple[float, float]:
    lk = Link(*link)
    dp = DPTraffic(stage, n, layer_bytes, lk, bucket_bytes=megatron_bucket_bytes(n),
                   overlap_grad_reduce=overlap)
    tl = step_timeline(list(t_fwd), list(t_bwd), microbatches=m, dp=dp)
    return (tl.exposed["dp_grad"] + tl.exposed["dp_param"] + tl.contention,
            tl.comm["dp_grad"] + tl.comm["dp_param"])


def dp_cost(t_fwd: list[float], t_bwd: list[float], microbatches: int, stage: int,
            group_size: int, layer_bytes: list[int], link: hardware.Link, link_name: str,
            overlap: bool = True) -> tuple[float, float]:
    """(seconds the step pays for DP, seconds of DP traffic) of one rank over ``M`` steps of
    gradient accumulation. ``link``: the :mod:`tpp.hardware` link the group crosses, used at
    its bus bandwidth; ``link_name`` names the wire (traffic on one name serializes)."""
    if group_size == 1:
        return 0.0, 0.0
    key = (tuple(t_fwd), tuple(t_bwd))
    lk = (link_name, link.bus_bandwidth, link.latency)
    args = (stage, group_size, tuple(layer_bytes), lk, overlap)
    if stage in (0, 1) or microbatches <= 4:
        return _run(*key, min(microbatches, 2) if stage in (0, 1) else microbatches, *args)
    e3, c3 = _run(*key, 3, *args)
    e4, c4 = _run(*key, 4, *args)
    m = microbatches
    return e4 + (e4 - e3) * (m - 4), c4 + (c4 - c3) * (m - 4)


@lru_cache(maxsize=8192)
def _tp_phase(t: float, comm: float, steps: int, link: tuple, decomposed: bool) -> float:
    """Seconds of one phase (a layer's forward or backward, ``t`` s of compute) with ``comm``
    s of TP traffic on its timeline (:func:`tpp.data_parallel.overlap.step_timeline`)."""
    if comm == 0:
        return t
    tp = TPTraffic(comm, 0.0, Link(*link), decomposed=decomposed, steps=steps)
    return step_timeline([t], [0.0], tp=tp).step_time


def tp_layer_times(t_fwd: float, t_bwd: float, comm_fwd: float, comm_bwd: float, tp: int,
                   link: hardware.Link, decomposed: bool = False) -> tuple[float, float]:
    """(forward, backward) seconds of one layer and one microbatch with its TP collectives:
    ``t_fwd``/``t_bwd`` of compute, ``comm_fwd``/``comm_bwd`` of TP traffic
    (:func:`tpp.costs.tp.tp_comm_time`) on ``link`` at its bus bandwidth.

    ``decomposed=False``: the collectives block, ``t + comm`` exactly. ``decomposed=True``
    (collective matmul, Megatron-LM's ``--tp-comm-overlap``): the timeline of
    :class:`tpp.data_parallel.overlap.TPTraffic` in ``tp`` chunks, contention included (the
    default of :mod:`tpp.data_parallel.overlap.contention`, NCCL's 24 of 132 SMs).
    TransformerEngine's userbuffers, which ``--tp-comm-overlap`` uses, take fewer by default: 1
    SM (copy engines) for the ring-exchange all-gathers, split in ``tp`` steps as here, and 16
    SMs for the pipelined reduce-scatters (4 splits) and the bulk overlaps (``get_default_config``
    in ``transformer_engine/pytorch/module/base.py``, NVIDIA/TransformerEngine @
    d0067d0da6cb01811b8072a7d304f0e00344ce2b); the module's one figure is kept, not a second
    one for TP.
    """
    lk = ("nvlink", link.bus_bandwidth, link.latency)
    return (_tp_phase(t_fwd, comm_fwd, tp, lk, decomposed),
            _tp_phase(t_bwd, comm_bwd, tp, lk, decomposed))
