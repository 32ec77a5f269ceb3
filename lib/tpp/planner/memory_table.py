"""Memory per GPU of a layout without timing it: :func:`evaluate_memory`.

:func:`tpp.planner.evaluate` answers memory and time together; the time needs each stage's
kernels timed, the pipeline simulated with those times and the data-parallel two-stream
timeline of the heaviest rank, none of which the memory depends on. A table of memory over
thousands of layouts (the memory explorer of the site, :mod:`tpp.site.explorer_functions`)
needs only the memory, so this entry point computes only that, from the same functions
``evaluate`` calls (one rule in one place):

* the checks of the arguments and of the layout's structure
  (:func:`tpp.planner.estimate._check_case`, ``_check_memory_options``,
  ``_structure_problems``);
* the parameters of each pipeline rank (``_rank_params``);
* the peak of the activation sets each rank holds, read from the schedule's order at unit costs
  (``_held_layers``, the cached simulation ``evaluate`` reads the same peak from: it does not
  depend on the durations);
* the terms of the heaviest rank (``_heaviest_rank_memory``: ZeRO's model states, Korthikanti's
  activations, the logits, ZeRO-3's gathered layer, the runtime reserve).

``tests/test_site_memory_table.py`` compares it with ``evaluate`` on a sample of layouts.
"""

from __future__ import annotations

from tpp import hardware
from tpp.costs import memory as cmem
from tpp.models import ModelConfig
from tpp.planner.estimate import (
    Estimate,
    _check_case,
    _check_memory_options,
    _heaviest_rank_memory,
    _held_layers,
    _hsdp_shard,
    _over,
    _rank_params,
    _sequence_parallel,
    _structure_problems,
)
from tpp.planner.layout import Layout

__all__ = ["evaluate_memory"]


def evaluate_memory(model: ModelConfig, layout: Layout, *, gpu: str = "h100_sxm",
                    gpus_per_node: int = 8, seq_len: int, global_batch: int,
                    attention: str | None = None, dropout: bool | None = None,
                    sequence_parallel: bool | None = None, moment_dtype: str = "fp32",
                    master_weights: bool = True, grad_bytes: int = 2, zero3_prefetch: int = 2,
                    runtime_reserve: bool = True,
                    fragmentation: float = cmem.FRAGMENTATION) -> Estimate:
    """The memory half of :func:`tpp.planner.evaluate` (same arguments, same meaning).

    Returns an :class:`~tpp.planner.Estimate` whose ``memory_bytes``, ``memory`` (the heaviest
    pipeline rank's terms), ``heaviest_rank``, ``layers``, ``microbatches`` and ``capacity``
    equal ``evaluate``'s; ``step_time`` is ``None`` and ``time`` empty. ``problems`` holds the
    structural rules the layout breaks (then no memory is computed, as in ``evaluate``) or
    that it needs more memory than the GPU has; ``fits`` says whether it holds in memory.
    """
    _check_case(model, layout, seq_len, global_batch, gpus_per_node)
    optimizer_bytes = _check_memory_options(attention, dropout, sequence_parallel, moment_dtype,
                                            master_weights, grad_bytes, zero3_prefetch,
                                            runtime_reserve)
    cmem.runtime_reserve_terms(0, 0, fragmentation=fragmentation)  # raises on a bad share
    dev = hardware.gpu(gpu)
    lay = layout
    est = Estimate(lay, False, _structure_problems(model, lay, gpus_per_node, seq_len,
                                                   global_batch, sequence_parallel),
                   capacity=dev.capacity, peak_flops=dev.peak_flops_bf16)
    if est.problems:
        return est
    est.microbatches = global_batch // (lay.dp * lay.microbatch_size)
    chunks, est.layers, layer_p, first, last, params = _rank_params(model, lay)
    held = _held_layers(lay.pp, est.microbatches, lay.virtual, tuple(chunks))
    shard_n = _hsdp_shard(lay, gpus_per_node) if lay.hsdp else lay.dp * lay.cp
    est.memory_bytes, est.heaviest_rank, est.memory = _heaviest_rank_memory(
        model, lay, seq_len // lay.cp, _sequence_parallel(lay, sequence_parallel), est.layers,
        layer_p, first, last, params, held, shard_n, attention, dropout, grad_bytes,
        optimizer_bytes, zero3_prefetch, runtime_reserve, fragmentation)
    if est.memory_bytes > dev.capacity:
        est.problems.append(_over(est.memory_bytes, est.heaviest_rank, dev))
    est.fits = not est.problems
    return est
