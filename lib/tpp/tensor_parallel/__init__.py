"""Tensor parallelism (Megatron-LM style) on simulated ranks, with explicit backward passes.

* :mod:`.operators`: f = copy_to_tp_region (identity fwd / all-reduce bwd) and
  g = reduce_from_tp_region (all-reduce fwd / identity bwd).
* :mod:`.linear`: ColumnParallelLinear, RowParallelLinear.
* :mod:`.mlp`: MLP (reference) and ShardedMLP (GELU and SwiGLU).
* :mod:`.activations`: gelu (tanh approximation), silu and their derivatives.
* :mod:`.sharding`: even splits with divisibility checks.
* :mod:`.attention`: Attention (reference) and ShardedAttention (MHA and GQA, KV replication).
* :mod:`.sequence`: the sequence-parallel operator pairs (all-gather / reduce-scatter).
* :mod:`.block`: a transformer block under TP and under TP+SP.
"""

from .activations import gelu, gelu_grad, sigmoid, silu, silu_grad
from .attention import Attention, ShardedAttention, attention_split, init_attention_weights
from .block import ShardedTransformerBlock, TransformerBlock, init_block_weights
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
from .sequence import (
    GatherFromSP,
    ReduceScatterToSP,
    ScatterToSP,
    gather_from_sequence_parallel_region,
    reduce_scatter_to_sequence_parallel_region,
    scatter_to_sequence_parallel_region,
    split_sequence,
)
from .sharding import check_divisible, check_tp, shard, shard_columns, shard_rows, unshard

__all__ = [
    "Attention",
    "GatherFromSP",
    "ReduceScatterToSP",
    "ScatterToSP",
    "ShardedAttention",
    "ShardedTransformerBlock",
    "TransformerBlock",
    "attention_split",
    "gather_from_sequence_parallel_region",
    "init_attention_weights",
    "init_block_weights",
    "reduce_scatter_to_sequence_parallel_region",
    "scatter_to_sequence_parallel_region",
    "split_sequence",
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
