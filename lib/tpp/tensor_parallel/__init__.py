"""Tensor parallelism (Megatron-LM style) on simulated ranks, with explicit backward passes.

* :mod:`.operators`: f = copy_to_tp_region (identity fwd / all-reduce bwd) and
  g = reduce_from_tp_region (all-reduce fwd / identity bwd).
* :mod:`.linear`: ColumnParallelLinear, RowParallelLinear.
* :mod:`.mlp`: MLP (reference) and ShardedMLP (GELU and SwiGLU).
* :mod:`.activations`: gelu (tanh approximation), silu and their derivatives.
* :mod:`.sharding`: even splits with divisibility checks.
"""

from .activations import gelu, gelu_grad, sigmoid, silu, silu_grad
from .linear import ColumnParallelLinear, RowParallelLinear, linear_backward
from .mlp import ACTIVATIONS, MLP, ShardedMLP
from .operators import (
    CopyToTP,
    ReduceFromTP,
    copy_to_tp_region,
    copy_to_tp_region_backward,
    reduce_from_tp_region,
    reduce_from_tp_region_backward,
)
from .sharding import check_divisible, check_tp, shard, shard_columns, shard_rows, unshard

__all__ = [
    "ACTIVATIONS",
    "MLP",
    "ColumnParallelLinear",
    "CopyToTP",
    "ReduceFromTP",
    "RowParallelLinear",
    "ShardedMLP",
    "check_divisible",
    "check_tp",
    "copy_to_tp_region",
    "copy_to_tp_region_backward",
    "gelu",
    "gelu_grad",
    "linear_backward",
    "reduce_from_tp_region",
    "reduce_from_tp_region_backward",
    "shard",
    "shard_columns",
    "shard_rows",
    "sigmoid",
    "silu",
    "silu_grad",
    "unshard",
]
