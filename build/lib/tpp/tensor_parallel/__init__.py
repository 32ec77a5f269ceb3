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

The MLP, attention and f/g exist once, as per-rank programs on a communicator
(:func:`sharded_mlp_forward`, :func:`sharded_attention_forward`, :func:`f_forward`, ...); the
classes run them on simulated ranks with :func:`tpp.collectives.spmd`, and
:mod:`tpp.distributed` runs them on ``torch.distributed`` processes.
"""

from .activations import gelu, gelu_grad, sigmoid, silu, silu_grad
from .attention import (
    Attention,
    AttentionRank,
    ShardedAttention,
    attention_split,
    init_attention_weights,
    sharded_attention_backward,
    sharded_attention_forward,
)
from .block import ShardedTransformerBlock, TransformerBlock, init_block_weights
from .linear import ColumnParallelLinear, RowParallelLinear, linear_backward
from .mlp import (
    ACTIVATIONS,
    MLP,
    MLP_VARIANTS,
    ShardedMLP,
    sharded_mlp_backward,
    sharded_mlp_forward,
)
from .operators import (
    CopyToTP,
    ReduceFromTP,
    copy_to_tp_region,
    copy_to_tp_region_backward,
    f_backward,
    f_forward,
    g_backward,
    g_forward,
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
    "AttentionRank",
    "MLP_VARIANTS",
    "f_backward",
    "f_forward",
    "g_backward",
    "g_forward",
    "sharded_attention_backward",
    "sharded_attention_forward",
    "sharded_mlp_backward",
    "sharded_mlp_forward",
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
