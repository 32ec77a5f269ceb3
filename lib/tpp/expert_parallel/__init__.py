"""Expert parallelism (chapter 16, part "Long context and mixture of experts"): a mixture-of-
experts MLP whose experts live on ``ep`` ranks, with all-to-all dispatch and combine on the
simulated process group.

- :mod:`.moe` — routing (top-k gates, capacity, token bounds), the reference MoE layer, the
  variable-size all-to-all and the expert-parallel forward.

Closed forms of the all-to-all bytes: :mod:`tpp.costs.expert_parallel`.
"""

from tpp.expert_parallel.moe import (
    MoEResult,
    Routing,
    all_to_all_v,
    capacity_keep,
    dispatch_rows,
    expert_capacity,
    moe_forward,
    moe_reference,
    route,
    token_bounds,
)

__all__ = ["Routing", "MoEResult", "route", "token_bounds", "expert_capacity", "capacity_keep",
           "dispatch_rows", "moe_reference", "moe_forward", "all_to_all_v"]
