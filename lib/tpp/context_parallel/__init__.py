"""Context parallelism (chapter 15, part "Long context and mixture of experts"): attention over a
sequence split across ``cp`` ranks, exact, on the simulated process group.

Modules, one idea each:

- :mod:`.attention` — what both algorithms share: the token layouts (contiguous, zig-zag), the
  reference attention, the blockwise online softmax (partials, merge, finalize) and the result.
- :mod:`.ring` — ring attention (Liu et al. 2023): K/V blocks travel a ring of ranks.
- :mod:`.backward` — ring attention's backward: K/V and their gradients travel the ring.
- :mod:`.ulysses` — DeepSpeed-Ulysses (Jacobs et al. 2023): all-to-all from sequence to heads.

Closed forms of the bytes and the work: :mod:`tpp.costs.context_parallel`.
The chapter imports the package: ``from tpp import context_parallel as cpm``.
"""

from tpp.context_parallel.attention import (
    LAYOUTS,
    AttentionPartial,
    ContextParallelResult,
    attention_reference,
    block_partial,
    finalize,
    online_softmax_merge,
    rank_chunks,
    rank_positions,
)
from tpp.context_parallel.backward import RingAttentionGrads, ring_attention_backward
from tpp.context_parallel.ring import ring_attention
from tpp.context_parallel.ulysses import ulysses_attention

__all__ = [
    "LAYOUTS",
    "AttentionPartial",
    "ContextParallelResult",
    "RingAttentionGrads",
    "attention_reference",
    "block_partial",
    "finalize",
    "online_softmax_merge",
    "rank_chunks",
    "rank_positions",
    "ring_attention",
    "ring_attention_backward",
    "ulysses_attention",
]
