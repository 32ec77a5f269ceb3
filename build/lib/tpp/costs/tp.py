"""Communication of tensor parallelism (Megatron) and its time on an interconnect.

One TP all-reduce carries the activation of one sub-layer: ``b * s * h`` elements, i.e.
``P = b s h e`` bytes with ``e`` bytes per element (Shoeybi et al. 2019: "two all-reduces in the
forward pass and two in the backward pass" per layer). A ring all-reduce over ``t`` ranks makes
each rank send ``2 (t - 1) / t * P`` bytes in ``2 (t - 1)`` steps; a reduce-scatter or
all-gather sends ``(t - 1) / t * P`` in ``t - 1`` steps (Patarasuk & Yuan 2009; NCCL's bus
bandwidth factors). Sequence parallelism (Korthikanti et al. 2022, Sec. 4.2.2) replaces each
all-reduce by a reduce-scatter + all-gather pair: the same bytes.

Collectives per layer (``n_layers`` = 1):

=================  =========  ==========================================================
phase              TP          TP + SP
=================  =========  ==========================================================
forward            2 AR        2 AG + 2 RS
backward           2 AR        2 AG + 2 RS (+ 2 AG re-gathering the saved input shards)
step (fwd + bwd)   4 AR        4 AG + 4 RS (+ 2 AG)
=================  =========  ==========================================================

Full activation recomputation re-runs the forward in backward: + 2 AR (or + 2 AG + 2 RS, and
the re-run forward provides the gathered inputs, so no extra re-gather).
Times use the alpha-beta model: ``steps * alpha + bytes_sent / bandwidth`` per collective, with
``bandwidth`` in bytes/s per direction (see :mod:`tpp.hardware`). ``algorithm`` (default
``"ring"``) names the all-reduce algorithm of :mod:`tpp.costs.algorithms` (ring, tree, NVLS,
one-shot, two-shot): its bytes per GPU and steps replace the ring's. Under SP the collectives
are reduce-scatters and all-gathers, modelled as rings only.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from tpp.collectives import bus_factor
from tpp.collectives import ring_steps as _ring_steps
from tpp.costs.algorithms import all_reduce_cost, check_algorithm
from tpp.hardware import bytes_per_element

__all__ = [
    "ring_factor",
    "ring_steps",
    "tp_collectives_per_layer",
    "tp_payload_bytes",
    "tp_bytes_sent_per_rank",
    "tp_comm_time",
    "TPTrainingEstimate",
    "tp_training_layer_time",
    "tp_crossover_degree",
    "tp_crossover_bandwidth",
]

PHASES = ("forward", "backward", "step")


def ring_factor(op: str, n: int) -> Fraction:
    """Bytes each rank sends per payload byte in a ring collective of ``n`` ranks.

    all_reduce ``2(n-1)/n``; reduce_scatter and all_gather ``(n-1)/n`` (payload = the FULL,
    unsharded tensor); broadcast 1. The same as :func:`tpp.collectives.bus_factor`.
    """
    return Fraction(bus_factor(op, n))


def ring_steps(op: str, n: int) -> int:
    """Steps of a ring collective: all_reduce 2(n-1); reduce_scatter and all_gather n-1."""
    return _ring_steps(op, n)


def tp_collectives_per_layer(
    phase: str = "step", sp: bool = False, recompute: str = "none", regather: bool = True
) -> dict[str, int]:
    """Number of each collective per layer, e.g. ``{"all_reduce": 4}`` for a TP training step.

    ``regather``: under SP, the backward all-gathers the saved sequence shard of each
    column-parallel layer's input again (Korthikanti et al. 2022, Sec. 4.2.2), +2 all-gathers.
    """
    if phase not in PHASES:
        raise ValueError(f"phase={phase!r}: use one of {', '.join(PHASES)}")
    if recompute not in ("none", "selective", "full"):
        raise ValueError(f"recompute={recompute!r}: use 'none', 'selective' or 'full'")
    n_fwd = {"forward": 2, "backward": 0, "step": 2}[phase]
    n_bwd = {"forward": 0, "backward": 2, "step": 2}[phase]
    n_rerun = 2 if (recompute == "full" and phase != "forward") else 0
    if not sp:
        return {"all_reduce": n_fwd + n_bwd + n_rerun}
    extra_ag = 2 if (regather and phase != "forward" and recompute != "full") else 0
    return {"all_gather": n_fwd + n_bwd + n_rerun + extra_ag,
            "reduce_scatter": n_fwd + n_bwd + n_rerun}


def tp_payload_bytes(b: int, s: int, h: int, dtype: str = "bf16") -> int:
    """Bytes of one TP all-reduce payload: the sub-layer output ``b * s * h * e``."""
    for name, v in (("b", b), ("s", s), ("h", h)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}={v!r} must be a positive int")
    e = Fraction(bytes_per_element(dtype))
    out = e * b * s * h
    if out.denominator != 1:
        raise ValueError(f"b*s*h*bytes is not a whole number of bytes for dtype={dtype!r}")
    return int(out)


def tp_bytes_sent_per_rank(
    b: int, s: int, h: int, t: int, n_layers: int = 1, phase: str = "step",
    sp: bool = False, dtype: str = "bf16", recompute: str = "none", regather: bool = True,
    algorithm: str = "ring",
) -> Fraction:
    """Bytes ONE rank sends for TP in ``n_layers`` layers: sum over collectives of
    ``ring_factor(op, t) * P`` with ``P = b s h e`` (exact ``Fraction``).

    A training step of a TP block (no SP): ``4 * 2(t-1)/t * b s h e`` per layer.
    ``algorithm``: the all-reduce algorithm (:data:`tpp.costs.algorithms.ALGORITHMS`).
    """
    if isinstance(t, bool) or not isinstance(t, int) or t < 1:
        raise ValueError(f"TP degree t={t!r} must be a positive int")
    if isinstance(n_layers, bool) or not isinstance(n_layers, int) or n_layers < 1:
        raise ValueError(f"n_layers={n_layers!r} must be a positive int")
    p = tp_payload_bytes(b, s, h, dtype)
    counts = tp_collectives_per_layer(phase, sp, recompute, regather)
    _check_sp_algorithm(sp, algorithm)
    return n_layers * sum(c * _sent(op, p, t, algorithm) for op, c in counts.items())


def _check_sp_algorithm(sp: bool, algorithm: str) -> None:
    check_algorithm(algorithm)
    if sp and algorithm != "ring":
        raise ValueError(f"algorithm={algorithm!r} names an all-reduce algorithm, and sequence "
                         "parallelism has none (reduce-scatters and all-gathers, modelled as "
                         "rings): pass sp=False or algorithm='ring'")


def _sent(op: str, p: int, t: int, algorithm: str) -> Fraction:
    if op == "all_reduce":
        return all_reduce_cost(p, t, algorithm).bytes_sent_per_rank
    return ring_factor(op, t) * p


def _steps(op: str, t: int, algorithm: str) -> int:
    if op == "all_reduce":
        return all_reduce_cost(0, t, algorithm).steps
    return ring_steps(op, t)


def tp_comm_time(
    b: int, s: int, h: int, t: int, bandwidth: float, latency: float = 0.0,
    n_layers: int = 1, phase: str = "step", sp: bool = False, dtype: str = "bf16",
    recompute: str = "none", regather: bool = True, algorithm: str = "ring",
) -> float:
    """Seconds of TP communication: sum over collectives of ``steps*alpha + sent/bandwidth``.

    ``bandwidth``: bytes/s per direction per rank (e.g. ``hardware.link("nvlink4").bandwidth``).
    ``latency``: alpha, seconds per ring step.
    """
    if not bandwidth > 0:
        raise ValueError(f"bandwidth={bandwidth!r} must be > 0 bytes/s")
    if latency < 0:
        raise ValueError(f"latency={latency!r} must be >= 0 s")
    sent = tp_bytes_sent_per_rank(b, s, h, t, n_layers, phase, sp, dtype, recompute, regather,
                                  algorithm)
    counts = tp_collectives_per_layer(phase, sp, recompute, regather)
    steps = n_layers * sum(c * _steps(op, t, algorithm) for op, c in counts.items()) \
        if t > 1 else 0
    return float(steps * latency + sent / Fraction(bandwidth))


@dataclass(frozen=True)
class TPTrainingEstimate:
    """Per-layer time of a TP training step (seconds): compute / t + exposed communication."""

    t: int
    compute: float
    comm: float

    @property
    def total(self) -> float:
        return self.compute + self.comm


def tp_training_layer_time(
    b: int, s: int, h: int, t: int, flops_per_layer: float, peak_flops: float,
    bandwidth: float, latency: float = 0.0, mfu: float = 1.0, overlap: float = 0.0,
    dtype: str = "bf16", algorithm: str = "ring",
) -> TPTrainingEstimate:
    """Time of one layer's training step under TP degree ``t`` (no overlap by default).

    ``compute = flops_per_layer / (t * peak_flops * mfu)``;
    ``comm = (1 - overlap) * tp_comm_time(..., phase="step")``.
    ``flops_per_layer``: FLOPs of forward + backward of one layer (see :mod:`tpp.costs.flops`).
    """
    if not 0 < mfu <= 1:
        raise ValueError(f"mfu={mfu} must be in (0, 1]")
    if not 0 <= overlap <= 1:
        raise ValueError(f"overlap={overlap} must be in [0, 1]")
    if not peak_flops > 0:
        raise ValueError(f"peak_flops={peak_flops!r} must be > 0 FLOP/s")
    compute = flops_per_layer / (t * peak_flops * mfu)
    comm = (1 - overlap) * tp_comm_time(b, s, h, t, bandwidth, latency, 1, "step", False, dtype,
                                        algorithm=algorithm)
    return TPTrainingEstimate(t, compute, comm)


def tp_crossover_degree(times: dict[int, float]) -> int:
    """The TP degree with the smallest time in ``{t: seconds}``; past it, more TP stops paying."""
    if not times:
        raise ValueError("times is empty: pass {tp_degree: seconds} for at least one degree")
    return min(sorted(times), key=lambda t: times[t])


def tp_crossover_bandwidth(
    b: int, s: int, h: int, t_low: int, t_high: int, flops_per_layer: float,
    peak_flops: float, mfu: float = 1.0, dtype: str = "bf16", algorithm: str = "ring",
) -> float:
    """Link bandwidth (bytes/s per direction) below which TP ``t_high`` trains a layer more
    slowly than TP ``t_low`` (no latency, no overlap).

    With ``T(t) = C / t + V(t) / B`` (``C`` = compute seconds at TP 1, ``V(t)`` = bytes a rank
    sends per step), ``T(t_high) = T(t_low)`` gives
    ``B* = (V(t_high) - V(t_low)) / (C / t_low - C / t_high)``.
    """
    if not t_high > t_low >= 1:
        raise ValueError(f"need t_high > t_low >= 1, got t_low={t_low}, t_high={t_high}")
    if not peak_flops > 0 or not 0 < mfu <= 1:
        raise ValueError("peak_flops must be > 0 FLOP/s and mfu in (0, 1]")
    c = Fraction(flops_per_layer) / Fraction(peak_flops * mfu)
    v_hi = tp_bytes_sent_per_rank(b, s, h, t_high, 1, "step", False, dtype, algorithm=algorithm)
    v_lo = tp_bytes_sent_per_rank(b, s, h, t_low, 1, "step", False, dtype, algorithm=algorithm)
    return float((v_hi - v_lo) / (c / t_low - c / t_high))
