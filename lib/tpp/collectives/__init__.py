"""A simulated process group of N ranks over numpy arrays, with a ledger of every collective.

Each rank's data is one numpy array; a collective takes a list with one array per rank and
returns a list with one array per rank. The ring algorithms really move chunks between
neighbouring ranks, step by step, so the bytes in the ledger are counted, not assumed.

Closed forms (Patarasuk & Yuan 2009; NCCL tests' "bus bandwidth" definitions), with ``n`` ranks
and a payload of ``M`` bytes:

=================  ==================  ==========  =========================
op                 bytes sent per rank  ring steps  bus factor (busbw/algbw)
=================  ==================  ==========  =========================
``all_reduce``     2 (n-1)/n * M        2 (n-1)     2 (n-1)/n
``reduce_scatter`` (n-1)/n * M          n-1         (n-1)/n
``all_gather``     (n-1)/n * M          n-1         (n-1)/n
``all_to_all``     (n-1)/n * M          n-1         (n-1)/n
``broadcast``      M (all but one rank) n-1         1
``send``           M (the sender)       1           1
=================  ==================  ==========  =========================

``M`` is one rank's input for all_reduce, reduce_scatter, all_to_all and broadcast, and the
gathered *output* for all_gather (so that all-reduce = reduce-scatter + all-gather on the same M).

The package is split along its seams: :mod:`.ledger` (op names, records), :mod:`.closed_forms`
(bus factor, ring steps, alpha-beta time), :mod:`.ring` (the step-by-step algorithms),
:mod:`.group` (:class:`ProcessGroup`, the list-of-arrays API) and :mod:`.comm` (rank-local
programs: the :class:`Communicator` interface, :func:`spmd` on simulated ranks).
"""

from .closed_forms import alpha_beta_time, bus_factor, ring_bytes_per_rank, ring_steps
from .comm import Communicator, SimulatedCommunicator, SimulatedWorld, spmd
from .group import ProcessGroup, group_of_size
from .ledger import (  # noqa: F401  (_check_n, _normalise_op: kept importable)
    OPS,
    REDUCE_OPS,
    CollectiveRecord,
    Transfer,
    _check_n,
    _normalise_op,
)

__all__ = [
    "OPS",
    "REDUCE_OPS",
    "CollectiveRecord",
    "Communicator",
    "ProcessGroup",
    "group_of_size",
    "SimulatedCommunicator",
    "SimulatedWorld",
    "Transfer",
    "alpha_beta_time",
    "bus_factor",
    "ring_bytes_per_rank",
    "ring_steps",
    "spmd",
]
