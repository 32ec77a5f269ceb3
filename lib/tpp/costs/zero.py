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
           "dp_collectives", "dp_bytes_per_rank", "adam_state_bytes", "zero3_gather_buffer_bytes"]

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


def adam_state_bytes(moment_dtype: str = "fp32", master_weights: bool = True,
                     master_dtype: str = "fp32") -> int:
    """Optimizer-state bytes per parameter of mixed-precision Adam: the ZeRO paper's ``K``.

    Two moments (momentum, variance) in ``moment_dtype`` and, with ``master_weights``, a copy
    of the weights in ``master_dtype``: fp32 moments + fp32 master = 12 (the ZeRO paper's
    ``K = 12``, Sec. 3.1); bf16 moments + fp32 master = 8; bf16 moments, no master (pure-bf16
    training with the bf16 weights updated in place, e.g. stochastic rounding) = 4.

    Megatron-LM's ``theoretical_memory_usage.py`` (commit d98e8a64) counts 18 bytes per
    parameter without the distributed optimizer: bf16 weights 2, **fp32** main gradients 4
    (``--accumulate-allreduce-grads-in-fp32``), fp32 main weights 4 and fp32 Adam moments 8;
    with it, ``6 + 12 / DP``. Our ``grad_bytes`` defaults to 2 (the ZeRO paper's ``2 + 2 + K``);
    pass ``grad_bytes=4`` to :func:`model_state_terms` for Megatron's convention.
    """
    sizes = {"fp32": 4, "bf16": 2, "fp16": 2}
    for name, v in (("moment_dtype", moment_dtype), ("master_dtype", master_dtype)):
        if v not in sizes:
            raise ValueError(f"{name}={v!r}: use 'fp32' or 'bf16' (or 'fp16')")
    if not isinstance(master_weights, bool):
        raise ValueError(f"master_weights={master_weights!r} must be True (an fp32 copy of "
                         "the weights) or False")
    return 2 * sizes[moment_dtype] + (sizes[master_dtype] if master_weights else 0)


def zero3_gather_buffer_bytes(unit_params, prefetch_depth: int = 2, param_bytes: int = 2,
                              grad_bytes: int = 2) -> int:
    """Bytes of unsharded parameters and gradients a ZeRO-3 / FSDP rank holds at its peak.

    ``unit_params``: parameter counts of the units gathered whole (FSDP wrap units: each
    layer, the embedding, the LM head). At most ``prefetch_depth`` units are gathered at once
    (FSDP's default is 2: the running unit and the one prefetched, its ``limit_all_gathers``
    rate limiter allowing two all-gathers in flight), and the running unit's full gradient
    exists until it is reduce-scattered. Any unit may be the largest, so::

        largest unit x (prefetch_depth x param_bytes + grad_bytes)

    With ``prefetch_depth=1`` this is DeepSpeed's ``largest_layer_memory =
    4 * largest_layer_params`` (microsoft/DeepSpeed ``docs/code-docs/source/memory.rst``: "2
    bytes fp16 params are gathered and 2 bytes fp16 grads are computed"), whose largest layer is
    usually the embedding or LM head. (DeepSpeed's 18 bytes per sharded parameter count fp32
    gradients; ours are ``grad_bytes`` of :func:`model_state_terms`.)
    """
    units = list(unit_params)
    if not units or any(isinstance(u, bool) or not isinstance(u, int) or u < 0 for u in units):
        raise ValueError("unit_params must be a non-empty list of parameter counts (ints >= 0): "
                         "one per FSDP unit (layer, embedding, LM head)")
    _check_int("prefetch_depth", prefetch_depth, 1,
               "units gathered at once (1: no prefetch, 2: FSDP's default)")
    _check_int("param_bytes", param_bytes, 1, "bytes per gathered parameter (2 for bf16)")
    _check_int("grad_bytes", grad_bytes, 0, "bytes per unsharded gradient (2 for bf16)")
    return max(units) * (prefetch_depth * param_bytes + grad_bytes)


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
