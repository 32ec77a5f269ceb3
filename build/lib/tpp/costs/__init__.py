"""Closed-form cost models: memory (:mod:`.memory`), TP communication (:mod:`.tp`),
all-reduce algorithms (:mod:`.algorithms`),
FLOPs (:mod:`.flops`) and pipeline communication (:mod:`.pipeline`).

Import the submodule you need, e.g. ``from tpp.costs import memory, tp``.
"""

from tpp.costs import algorithms, flops, memory, tp
from tpp.costs.memory import activation_bytes_per_layer, korthikanti_activation_bytes
from tpp.costs.tp import ring_factor, tp_bytes_sent_per_rank, tp_comm_time

__all__ = [
    "algorithms",
    "flops",
    "memory",
    "tp",
    "activation_bytes_per_layer",
    "korthikanti_activation_bytes",
    "ring_factor",
    "tp_bytes_sent_per_rank",
    "tp_comm_time",
]
