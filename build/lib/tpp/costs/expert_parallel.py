"""Closed forms of expert parallelism: the bytes and time of the MoE all-to-alls (simulated
exactly by :mod:`tpp.expert_parallel`).

Notation: ``T_r`` tokens per rank, model width ``d``, ``E`` experts, ``top_k``, EP degree ``ep``,
``e`` bytes per element. One MoE layer's forward runs two all-to-alls (dispatch, combine); its
backward runs them again in reverse, so a training step has four (GShard, Lepikhin et al. 2021).

* Balanced routing (every rank sends ``T_r top_k / ep`` rows to each rank): each all-to-all
  makes a rank send the all-to-all factor ``(ep-1)/ep`` (:func:`tpp.collectives.bus_factor`)
  of its ``T_r top_k d e`` bytes of rows.
* Capacity factor ``cf``: the buffers ``(E, C, d)`` with ``C = ceil(cf T_r top_k / E)`` move
  whatever the routing: ``(ep-1)/ep E C d e`` bytes per all-to-all.
"""

from __future__ import annotations

import math
from fractions import Fraction

from tpp.collectives import bus_factor
from tpp.collectives import ring_steps as _ring_steps
from tpp.hardware import bytes_per_element

__all__ = [
    "ALL_TO_ALLS",
    "moe_all_to_all_bytes_per_rank",
    "moe_layer_bytes_per_rank",
    "moe_comm_time",
]

#: All-to-alls per MoE layer: forward = dispatch + combine; the backward repeats both.
ALL_TO_ALLS = {"forward": 2, "backward": 2, "step": 4}


def _pos(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r} must be a positive int")
    return value


def moe_all_to_all_bytes_per_rank(tokens_per_rank: int, d: int, top_k: int, ep: int,
                                  n_experts: int | None = None,
                                  capacity_factor: float | None = None,
                                  dtype: str = "bf16") -> Fraction:
    """Bytes one rank sends in ONE all-to-all (dispatch or combine) of an MoE layer.

    Dropless, balanced routing: ``(ep-1)/ep * T_r top_k d e``. With ``capacity_factor`` (needs
    ``n_experts``): ``(ep-1)/ep * E C d e``, ``C = ceil(cf T_r top_k / E)``.
    """
    for name, val in (("tokens_per_rank", tokens_per_rank), ("d", d), ("top_k", top_k),
                      ("ep", ep)):
        _pos(val, name)
    e = Fraction(bytes_per_element(dtype))
    if capacity_factor is None:
        rows = tokens_per_rank * top_k
    else:
        if n_experts is None:
            raise ValueError("capacity_factor needs n_experts: pass n_experts=E")
        _pos(n_experts, "n_experts")
        if not capacity_factor > 0:
            raise ValueError(f"capacity_factor={capacity_factor!r} must be > 0")
        rows = n_experts * math.ceil(capacity_factor * tokens_per_rank * top_k / n_experts)
    if n_experts is not None:
        _pos(n_experts, "n_experts")
        if top_k > n_experts:
            raise ValueError(f"top_k={top_k} > n_experts={n_experts}: choose top_k <= "
                             f"{n_experts}")
        if n_experts % ep:
            raise ValueError(f"n_experts={n_experts} is not divisible by ep={ep}: choose an "
                             "ep that divides it")
    return bus_factor("all_to_all", ep) * rows * d * e


def moe_layer_bytes_per_rank(tokens_per_rank: int, d: int, top_k: int, ep: int,
                             phase: str = "step", n_experts: int | None = None,
                             capacity_factor: float | None = None,
                             dtype: str = "bf16") -> Fraction:
    """Bytes one rank sends for one MoE layer: ``ALL_TO_ALLS[phase]`` all-to-alls."""
    if phase not in ALL_TO_ALLS:
        raise ValueError(f"phase={phase!r}: use one of {', '.join(ALL_TO_ALLS)}")
    return ALL_TO_ALLS[phase] * moe_all_to_all_bytes_per_rank(
        tokens_per_rank, d, top_k, ep, n_experts, capacity_factor, dtype)


def moe_comm_time(tokens_per_rank: int, d: int, top_k: int, ep: int, bandwidth: float,
                  latency: float = 0.0, phase: str = "step", n_experts: int | None = None,
                  capacity_factor: float | None = None, dtype: str = "bf16") -> float:
    """Seconds of the layer's all-to-alls: each ``(ep-1) alpha + bytes / B`` (alpha-beta)."""
    if not bandwidth > 0:
        raise ValueError(f"bandwidth={bandwidth!r} must be > 0 bytes/s")
    if latency < 0:
        raise ValueError(f"latency={latency!r} must be >= 0 s")
    sent = moe_layer_bytes_per_rank(tokens_per_rank, d, top_k, ep, phase, n_experts,
                                    capacity_factor, dtype)
    steps = ALL_TO_ALLS[phase] * _ring_steps("all_to_all", ep)
    return float(steps * latency + sent / Fraction(bandwidth))
