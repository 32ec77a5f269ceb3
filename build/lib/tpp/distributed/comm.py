"""The communicator of a real ``torch.distributed`` process group (gloo on CPU, NCCL on GPUs).

:class:`TorchCommunicator` has the methods of :class:`tpp.collectives.Communicator`, so the
per-rank layer programs of :mod:`tpp.tensor_parallel` run on it unchanged. Arrays stay numpy in
the layer code; each collective turns its input into a tensor on the communicator's device,
calls ``torch.distributed`` and hands back a numpy array. Every call is appended to
:attr:`TorchCommunicator.observed`: the op, its tag and the bytes of the tensors actually handed
to ``torch.distributed`` (input and output), to compare with the simulated ledger's payloads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tpp.collectives.ledger import REDUCE_OPS

__all__ = ["ObservedCall", "TorchCommunicator", "require_torch"]

INSTALL_HINT = ('tpp.distributed needs PyTorch: install the optional extra with '
                'pip install -e ".[torch]" (it pins torch==2.13.0, a CPU build)')


def require_torch() -> Any:
    """Import and return ``torch``; raise ImportError saying how to install it when missing."""
    try:
        import torch
        import torch.distributed  # noqa: F401
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    return torch


@dataclass(frozen=True)
class ObservedCall:
    """One collective as ``torch.distributed`` saw it on this rank."""

    op: str
    tag: str
    group_size: int
    input_bytes: int
    output_bytes: int

    @property
    def payload_bytes(self) -> int:
        """The ledger's convention: the gathered output for all_gather, else the input."""
        return self.output_bytes if self.op == "all_gather" else self.input_bytes


class TorchCommunicator:
    """This process's rank in a ``torch.distributed`` group (default: the world).

    ``device``: where tensors go for the collectives (``"cpu"`` for gloo; ``"cuda:<local
    rank>"`` for NCCL).
    """

    def __init__(self, group: Any = None, device: str = "cpu") -> None:
        torch = require_torch()
        dist = torch.distributed
        if not dist.is_initialized():
            raise ValueError("torch.distributed is not initialised: call "
                             "torch.distributed.init_process_group first, or use "
                             "tpp.distributed.spmd / World, which do")
        self.torch, self.dist, self.group = torch, dist, group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self.device = device
        self.observed: list[ObservedCall] = []

    def __repr__(self) -> str:
        return f"TorchCommunicator(rank={self.rank}, size={self.size}, device={self.device!r})"

    # -- helpers -------------------------------------------------------------------------------
    def _tensor(self, x: np.ndarray) -> Any:
        return self.torch.from_numpy(np.ascontiguousarray(x)).to(self.device).clone()

    @staticmethod
    def _numpy(t: Any) -> np.ndarray:
        return t.detach().cpu().numpy()

    def _reduce_op(self, op: str) -> Any:
        if op not in REDUCE_OPS:
            raise ValueError(f"unknown reduction op {op!r}: use one of {', '.join(REDUCE_OPS)}")
        R = self.dist.ReduceOp
        return {"sum": R.SUM, "prod": R.PRODUCT, "max": R.MAX, "min": R.MIN}[op]

    def _note(self, op: str, tag: str, inp: Any, out_bytes: int) -> None:
        self.observed.append(ObservedCall(op, tag, self.size, inp.numel() * inp.element_size(),
                                          int(out_bytes)))

    def _split_axis(self, x: np.ndarray, axis: int, what: str) -> int:
        ax = axis % x.ndim
        if x.shape[ax] % self.size:
            raise ValueError(f"{what}: axis {ax} has length {x.shape[ax]}, not divisible by the "
                             f"group size {self.size}: pad that axis to a multiple of {self.size}")
        return ax

    # -- the collectives -----------------------------------------------------------------------
    def all_reduce(self, x: np.ndarray, op: str = "sum", *, tag: str = "") -> np.ndarray:
        t = self._tensor(x)
        self.dist.all_reduce(t, op=self._reduce_op(op), group=self.group)
        self._note("all_reduce", tag, t, t.numel() * t.element_size())
        return self._numpy(t)

    def reduce_scatter(self, x: np.ndarray, axis: int = 0, op: str = "sum", *,
                       tag: str = "") -> np.ndarray:
        ax = self._split_axis(x, axis, "reduce_scatter")
        # rank order along ``axis``: move it to the front so the chunks are contiguous
        t = self._tensor(np.moveaxis(x, ax, 0))
        out = self.torch.empty((t.shape[0] // self.size,) + tuple(t.shape[1:]),
                               dtype=t.dtype, device=t.device)
        self.dist.reduce_scatter_single(out, t, op=self._reduce_op(op), group=self.group)
        self._note("reduce_scatter", tag, t, out.numel() * out.element_size())
        return np.moveaxis(self._numpy(out), 0, ax)

    def all_gather(self, x: np.ndarray, axis: int = 0, *, tag: str = "") -> np.ndarray:
        ax = axis % np.ndim(x)
        t = self._tensor(np.moveaxis(x, ax, 0))
        out = self.torch.empty((t.shape[0] * self.size,) + tuple(t.shape[1:]),
                               dtype=t.dtype, device=t.device)
        self.dist.all_gather_single(out, t, group=self.group)
        self._note("all_gather", tag, t, out.numel() * out.element_size())
        return np.moveaxis(self._numpy(out), 0, ax)

    def all_to_all(self, x: np.ndarray, axis: int = 0, *, tag: str = "") -> np.ndarray:
        ax = self._split_axis(x, axis, "all_to_all")
        t = self._tensor(np.moveaxis(x, ax, 0))
        out = self.torch.empty_like(t)
        self.dist.all_to_all_single(out, t, group=self.group)
        self._note("all_to_all", tag, t, out.numel() * out.element_size())
        return np.moveaxis(self._numpy(out), 0, ax)

    def broadcast(self, x: np.ndarray | None, root: int = 0, *, tag: str = "") -> np.ndarray:
        """Every rank gets root's ``x``; non-root ranks pass a buffer of the same shape and
        dtype, or None (the shape and dtype are then broadcast first)."""
        if self.rank == root and x is None:
            raise ValueError(f"broadcast: root rank {root} passed None: give the root an array")
        meta = [None if x is None else (tuple(np.shape(x)), np.asarray(x).dtype.str)]
        self.dist.broadcast_object_list(meta, src=self._global(root), group=self.group)
        shape, dtype = meta[0]
        x = np.zeros(shape, dtype=np.dtype(dtype)) if self.rank != root else x
        t = self._tensor(x)
        self.dist.broadcast(t, src=self._global(root), group=self.group)
        self._note("broadcast", tag, t, t.numel() * t.element_size())
        return self._numpy(t)

    def barrier(self) -> None:
        self.dist.barrier(group=self.group)

    def _global(self, group_rank: int) -> int:
        if self.group is None:
            return group_rank
        return self.dist.get_global_rank(self.group, group_rank)

    def new_subgroups(self, groups: list[list[int]], name: str = "sub"
                      ) -> TorchCommunicator | None:
        """Collective: every rank passes the same disjoint lists of (global) ranks; returns this
        rank's communicator in its group (None if in none)."""
        mine = None
        me = self.dist.get_rank()
        for g in groups:
            pg = self.dist.new_group([int(r) for r in g])
            if me in g:
                mine = TorchCommunicator(pg, self.device)
        return mine
