"""The rank-local programs of :mod:`tpp.tensor_parallel` on a real ``torch.distributed`` engine.

Optional: needs the ``[torch]`` extra (``pip install -e ".[torch]"``, torch==2.13.0). Importing
this package works without torch; using it raises ImportError saying how to install it.

* :class:`TorchCommunicator`: the communicator of a ``torch.distributed`` process group (gloo on
  CPU, NCCL on GPUs), the same interface as :class:`tpp.collectives.SimulatedCommunicator`.
* :func:`spmd` / :class:`World`: spawn P processes with a loopback rendezvous and run per-rank
  programs on them (timeouts on every rendezvous and join; processes always reaped).
* :mod:`.programs`: the per-rank programs chapter 18 and the tests run (our layers, PyTorch's
  ``parallelize_module``, ``torch.distributed.pipelining``, an all-reduce timing sweep).
"""

from .comm import INSTALL_HINT, ObservedCall, TorchCommunicator, require_torch
from .launch import BACKENDS, TORCHRUN_NOTE, World, spmd


def torch_available() -> bool:
    """Whether ``torch`` (with ``torch.distributed``) can be imported."""
    try:
        require_torch()
    except ImportError:
        return False
    return True


__all__ = [
    "BACKENDS",
    "INSTALL_HINT",
    "ObservedCall",
    "TORCHRUN_NOTE",
    "TorchCommunicator",
    "World",
    "require_torch",
    "spmd",
    "torch_available",
]
