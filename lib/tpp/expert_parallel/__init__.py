"""Expert parallelism (chapter 16, part "Long context and mixture of experts"): a mixture-of-
experts MLP whose experts live on ``ep`` ranks, with all-to-all dispatch and combine on the
simulated process group.

- :mod:`.routing` — top-k gates, the ranks' token blocks, expert capacity and dropped rows,
  the rows each rank sends to each rank.
- :mod:`.moe` — the reference MoE layer, the variable-size all-to-all and the expert-parallel
  forward (dispatch, experts, combine).

Closed forms of the all-to-all bytes: :mod:`tpp.costs.expert_parallel`.
"""

from tpp.expert_parallel.moe import MoEResult, all_to_all_v, moe_forward, moe_reference
from tpp.expert_parallel.routing import (
    Routing,
    capacity_keep,
    dispatch_rows,
    expert_capacity,
    route,
    token_bounds,
)

__all__ = ["Routing", "MoEResult", "route", "token_bounds", "expert_capacity", "capacity_keep",
           "dispatch_rows", "moe_reference", "moe_forward", "all_to_all_v"]
