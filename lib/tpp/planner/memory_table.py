"""Memory per GPU of a layout without timing it: :func:`evaluate_memory`.

:func:`tpp.planner.evaluate` answers memory and time together; the time needs each stage's
kernels timed, the pipeline simulated with those times and the data-parallel two-stream
timeline of the heaviest rank, none of which the memory depends on. A table of memory over
thousands of layouts (the memory explorer of the site, :mod:`tpp.site.explorer_functions`)
needs only the memory, so this entry point computes only that, with the same step
``evaluate`` opens with (one rule in one place), :func:`tpp.planner.estimate.memory_step`:

* the checks of the arguments and of the layout's structure, the parameters of each pipeline
  rank (``_rank_params``);
* the peak of the activation sets each rank holds, read from the schedule's order at unit costs
  (:meth:`~tpp.planner.estimate.RankMemory.held_layers`, the cached simulation ``evaluate``
  reads the same peak from: it does not depend on the durations);
* the terms of the heaviest rank (:meth:`~tpp.planner.estimate.RankMemory.fill`: ZeRO's model
  states, Korthikanti's activations, the logits, ZeRO-3's gathered layer, the runtime reserve).

``tests/test_site_memory_table.py`` compares it with ``evaluate`` on a sample of layouts.
"""

from __future__ import annotations

from tpp.costs import memory as cmem
from tpp.models import ModelConfig
from tpp.planner.estimate import Estimate, _over, memory_step
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
    est, dev, mem = memory_step(
        model, layout, gpu=gpu, gpus_per_node=gpus_per_node, seq_len=seq_len,
        global_batch=global_batch, attention=attention, dropout=dropout,
        sequence_parallel=sequence_parallel, moment_dtype=moment_dtype,
        master_weights=master_weights, grad_bytes=grad_bytes, zero3_prefetch=zero3_prefetch,
        runtime_reserve=runtime_reserve, fragmentation=fragmentation)
    if mem is None:
        return est
    mem.fill(est, mem.held_layers(est.microbatches))
    if est.memory_bytes > dev.capacity:
        est.problems.append(_over(est.memory_bytes, est.heaviest_rank, dev))
    est.fits = not est.problems
    return est
