"""Memory and traffic of data parallelism with ZeRO stages 0-3 (Rajbhandari et al. 2020).

Mixed-precision Adam keeps, per parameter, ``2`` bytes of 16-bit weights, ``2`` bytes of 16-bit
gradients and ``K = 12`` bytes of optimizer state (fp32 master weights, momentum, variance):
the ZeRO paper's ``(2 + 2 + K) Psi`` (Sec. 3.1). Over a data-parallel group of ``N`` ranks
(Sec. 5.1, Fig. 1):

=======  ===========================================  ==============================
stage    what is sharded                              bytes per rank
=======  ===========================================  ==============================
0 (DP)   nothing                                      ``(2 + 2 + K) Psi``
1        optimizer states (P_os)                      ``(2 + 2) Psi + K Psi / N``
2        + gradients (P_os+g)                         ``2 Psi + (2 + K) Psi / N``
3        + parameters (P_os+g+p; FSDP)                ``(2 + 2 + K) Psi / N``
=======  ===========================================  ==============================

A shard holds ``ceil(Psi / N)`` elements: the flat buffer is padded to a multiple of ``N``, as
FSDP pads its flat parameter, so that every ring chunk has the same size. With ``N | Psi`` this is
the paper's ``Psi / N``.

Bytes each rank sends per optimizer step (ring collectives, :func:`tpp.collectives.bus_factor`)
with ``M`` microbatches accumulated per step and ``P = ceil(Psi/N) N`` the padded payload:

* stage 0: one gradient all-reduce, ``2 (N-1)/N P e``;
* stage 1: a gradient reduce-scatter + an all-gather of the updated weights, ``2 (N-1)/N P e``
  (the paper's Sec. 7.2: "the same communication volume as DP");
* stage 2: gradients are sharded, so every microbatch's gradient is reduce-scattered before the
  next overwrites it, then one all-gather: ``(M + 1) (N-1)/N P e``;
* stage 3: per microbatch an all-gather before forward, another before backward and a
  reduce-scatter of the gradients; weights stay sharded after the update:
  ``3 M (N-1)/N P e`` (Sec. 7.2.3: "1.5x" DP for ``M = 1``).

``tpp.data_parallel`` runs these steps on the simulated process group and its tests assert that
the ledger equals these functions byte for byte.
"""

from __future__ import annotations

from fractions import Fraction

from tpp.collectives import bus_factor
from tpp.hardware import bytes_per_element

__all__ = ["STAGES", "shard_elements", "model_state_bytes", "model_state_terms",
           "dp_collectives", "dp_bytes_per_rank"]

STAGES = (0, 1, 2, 3)


def _check_int(name: str, value: int, low: int, hint: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name}={value!r} must be an int >= {low}: {hint}")
    return value


def _check_stage(stage: int) -> int:
    if isinstance(stage, bool) or stage not in STAGES:
        raise ValueError(f"ZeRO stage={stage!r}: use 0 (plain DP), 1 (optimizer states), "
                         "2 (+ gradients) or 3 (+ parameters, FSDP)")
    return stage


def shard_elements(n_params: int, dp: int) -> int:
    """Elements of one rank's shard: ``ceil(Psi / N)`` (the flat buffer padded to N | size)."""
    _check_int("n_params", n_params, 1, "count the model's parameters (>= 1)")
    _check_int("dp", dp, 1, "the data-parallel degree N is a positive int")
    return -(-n_params // dp)


def model_state_terms(
    n_params: int, dp: int, stage: int, param_bytes: int = 2, grad_bytes: int = 2,
    optimizer_bytes: int = 12,
) -> dict[str, int]:
    """Bytes per rank of ``weights``, ``gradients`` and ``optimizer_states`` at ZeRO ``stage``."""
    _check_stage(stage)
    shard = shard_elements(n_params, dp)
    for name, v in (("param_bytes", param_bytes), ("grad_bytes", grad_bytes),
                    ("optimizer_bytes", optimizer_bytes)):
        _check_int(name, v, 0, "bytes per parameter (e.g. 2, 2 and 12 for mixed-precision Adam)")
    return {
        "weights": param_bytes * (shard if stage >= 3 else n_params),
        "gradients": grad_bytes * (shard if stage >= 2 else n_params),
        "optimizer_states": optimizer_bytes * (shard if stage >= 1 else n_params),
    }


def model_state_bytes(
    n_params: int, dp: int, stage: int, param_bytes: int = 2, grad_bytes: int = 2,
    optimizer_bytes: int = 12,
) -> int:
    """Bytes of parameters + gradients + optimizer states on one rank (ZeRO paper, Sec. 5.1).

    >>> model_state_bytes(7_500_000_000, 64, 0) // 10**9, model_state_bytes(7_500_000_000, 64, 3)
    (120, 1875000000)
    """
    return sum(model_state_terms(n_params, dp, stage, param_bytes, grad_bytes,
                                 optimizer_bytes).values())


def dp_collectives(stage: int, microbatches: int = 1) -> dict[str, int]:
    """The collectives of one optimizer step over the DP group, e.g. ``{"all_reduce": 1}``."""
    _check_stage(stage)
    m = _check_int("microbatches", microbatches, 1, "accumulate >= 1 microbatch per step")
    return [{"all_reduce": 1},
            {"reduce_scatter": 1, "all_gather": 1},
            {"reduce_scatter": m, "all_gather": 1},
            {"all_gather": 2 * m, "reduce_scatter": m}][stage]


def dp_bytes_per_rank(
    n_params: int, dp: int, stage: int, dtype: str = "bf16", microbatches: int = 1
) -> int:
    """Bytes each rank sends per optimizer step at ZeRO ``stage`` (ring collectives).

    Every collective carries the padded flat buffer ``P = ceil(Psi/N) N`` elements of ``dtype``;
    each costs ``bus_factor(op, N) * P * e`` (see the module docstring for the counts).
    """
    shard = shard_elements(n_params, dp)
    e = Fraction(bytes_per_element(dtype))
    payload = e * shard * dp
    total = sum(c * bus_factor(op, dp) * payload
                for op, c in dp_collectives(stage, microbatches).items())
    if total.denominator != 1:
        raise ValueError(f"dtype={dtype!r} gives a fractional byte count: pad to whole bytes")
    return int(total)
