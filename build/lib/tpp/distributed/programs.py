"""Per-rank programs that chapter 18 and the tests run on both engines.

Each takes its per-rank arguments and ``comm`` (a simulated or a ``torch.distributed``
communicator) and returns plain Python/numpy values, so the results of the two engines can be
compared element by element. They live in a module (not a notebook) because spawned processes
must be able to import them.

* :func:`tp_mlp_step`, :func:`tp_attention_step`, :func:`sp_norm_mlp_step`: OUR layers, the
  per-rank programs of :mod:`tpp.tensor_parallel`, forward and backward.
* :func:`torch_tp_mlp_step`: the same MLP written as a plain ``torch.nn`` module and
  parallelised by PyTorch itself (``parallelize_module`` with ``ColwiseParallel``,
  ``RowwiseParallel`` and, for the norm, ``SequenceParallel``), with every collective it issues
  recorded by :class:`CollectiveRecorder`.
* :func:`pipeline_step`: a tiny model through ``torch.distributed.pipelining`` (GPipe or 1F1B),
  recording the order in which each stage ran its forward and backward chunks.
* :func:`time_all_reduce`: a timed all-reduce sweep (bytes vs seconds).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from tpp.collectives import Communicator
from tpp.tensor_parallel.attention import (
    AttentionRank,
    sharded_attention_backward,
    sharded_attention_forward,
)
from tpp.tensor_parallel.layernorm import layernorm_backward, layernorm_forward
from tpp.tensor_parallel.mlp import sharded_mlp_backward, sharded_mlp_forward

__all__ = [
    "CollectiveRecorder",
    "pipeline_reference",
    "pipeline_step",
    "sp_norm_mlp_step",
    "time_all_reduce",
    "torch_tp_mlp_step",
    "tp_attention_step",
    "tp_mlp_step",
]


def _observed(comm: Any) -> list[tuple[str, str, int]]:
    """(op, tag, payload bytes) of the collectives a torch communicator handed to torch."""
    return [(o.op, o.tag, o.payload_bytes) for o in getattr(comm, "observed", [])]


# --------------------------------------------------------------------------------------------
# our layers
# --------------------------------------------------------------------------------------------
def tp_mlp_step(x: np.ndarray, w1: np.ndarray, w2: np.ndarray, w3: np.ndarray | None,
                dy: np.ndarray, variant: str = "correct", *, comm: Communicator
                ) -> dict[str, Any]:
    """Forward and backward of the sharded MLP on one rank (shards w1, w2[, w3])."""
    y, cache = sharded_mlp_forward(x, w1, w2, w3, comm=comm, variant=variant)
    dx, grads, dx_partial = sharded_mlp_backward(dy, cache, comm=comm)
    return {"y": y, "dx": dx, "dx_partial": dx_partial, "grads": grads,
            "observed": _observed(comm)}


def tp_attention_step(x: np.ndarray, shard: AttentionRank, mask: np.ndarray | None,
                      dy: np.ndarray, replicas: int = 1, *, comm: Any) -> dict[str, Any]:
    """Forward and backward of sharded attention on one rank; with KV replication the ranks
    holding one KV head form a subgroup (``comm.new_subgroups``) for their K/V gradients."""
    kv_comm = None
    if replicas > 1:
        groups = [list(range(j, j + replicas)) for j in range(0, comm.size, replicas)]
        kv_comm = comm.new_subgroups(groups, name="kv_head")
    y, saved = sharded_attention_forward(x, shard, mask, comm=comm)
    dx, grads = sharded_attention_backward(dy, shard, saved, mask if shard.recompute_core
                                           else None, kv_comm, comm=comm)
    return {"y": y, "dx": dx, "grads": grads, "observed": _observed(comm)}


def sp_norm_mlp_step(x: np.ndarray, ln_g: np.ndarray, ln_b: np.ndarray, w1: np.ndarray,
                     w2: np.ndarray, dy: np.ndarray, eps: float = 1e-5, *, comm: Communicator
                     ) -> dict[str, Any]:
    """LayerNorm then the MLP under sequence parallelism, on one rank: ``x`` and ``dy`` are this
    rank's slices of the sequence; the norm runs on the slice, the MLP enters with an all-gather
    and leaves with a reduce-scatter; the norm's weight gradients (partial sums over the
    slices) are all-reduced (Korthikanti et al. 2022, Sec. 4.2.2)."""
    a = layernorm_forward(x, ln_g, ln_b, eps)
    y, cache = sharded_mlp_forward(a, w1, w2, comm=comm, sequence_parallel=True)
    da, grads, _ = sharded_mlp_backward(dy, cache, comm=comm)
    dx, dg, db = layernorm_backward(x, ln_g, da, eps)
    grads["ln_g"] = comm.all_reduce(dg, tag="sp.layernorm_grads")
    grads["ln_b"] = comm.all_reduce(db, tag="sp.layernorm_grads")
    return {"y": y, "dx": dx, "grads": grads, "observed": _observed(comm)}


# --------------------------------------------------------------------------------------------
# PyTorch's own tensor parallelism
# --------------------------------------------------------------------------------------------
class CollectiveRecorder:
    """A ``TorchDispatchMode`` that records every collective PyTorch issues underneath DTensor:
    ``(op, payload bytes)`` with the ledger's convention (the gathered output for all-gather,
    else the input). Op names are normalised to ours (``all_reduce``, ``all_gather``,
    ``reduce_scatter``, ``all_to_all``, ``broadcast``)."""

    _NAMES = {"all_reduce": "all_reduce", "allreduce": "all_reduce",
              "all_gather": "all_gather", "allgather": "all_gather",
              "reduce_scatter": "reduce_scatter", "all_to_all": "all_to_all",
              "alltoall": "all_to_all", "broadcast": "broadcast"}

    def __init__(self) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        recorder = self
        self.calls: list[tuple[str, int]] = []

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                from torch.distributed.tensor import DTensor

                if any(t is DTensor for t in types):
                    return NotImplemented          # let DTensor lower itself to collectives
                out = func(*args, **(kwargs or {}))
                recorder._see(func, args, out)
                return out

        self._mode = _Mode()

    def _see(self, func: Any, args: tuple, out: Any) -> None:
        import torch

        ns = getattr(func, "namespace", "")
        if ns not in ("_c10d_functional", "c10d", "_c10d_functional_autograd"):
            return
        base = func._overloadpacket.__name__.strip("_")
        op = next((v for k, v in self._NAMES.items() if base.startswith(k)), None)
        if op is None:
            return
        inp = next(a for a in args if isinstance(a, torch.Tensor))
        res = out if isinstance(out, torch.Tensor) else inp
        size = res if op == "all_gather" else inp
        self.calls.append((op, size.numel() * size.element_size()))

    def __enter__(self) -> CollectiveRecorder:
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._mode.__exit__(*exc)


def _torch_norm_mlp(d: int, d_ff: int, with_norm: bool, eps: float) -> Any:
    import torch
    from torch import nn

    class NormMLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            kw = {"dtype": torch.float64}
            self.norm = nn.LayerNorm(d, eps=eps, **kw) if with_norm else nn.Identity()
            self.fc1 = nn.Linear(d, d_ff, bias=False, **kw)
            self.act = nn.GELU(approximate="tanh")
            self.fc2 = nn.Linear(d_ff, d, bias=False, **kw)

        def forward(self, x):
            return self.fc2(self.act(self.fc1(self.norm(x))))

    return NormMLP()


def torch_tp_mlp_step(x: np.ndarray, w1: np.ndarray, w2: np.ndarray, dy: np.ndarray,
                      ln_g: np.ndarray | None = None, ln_b: np.ndarray | None = None,
                      eps: float = 1e-5, *, comm: Any) -> dict[str, Any]:
    """The FULL weights in a plain ``torch.nn`` module, parallelised by PyTorch.

    Without ``ln_g``: ``fc1`` ColwiseParallel, ``fc2`` RowwiseParallel (input and output
    replicated; ``x``, ``dy`` are full). With ``ln_g``/``ln_b``: a LayerNorm first, under
    ``SequenceParallel`` (sequence on axis 0), ``fc1`` ColwiseParallel(input Shard(0)), ``fc2``
    RowwiseParallel(output Shard(0)); ``x`` and ``dy`` are then this rank's sequence slices.
    Returns the (local) output, input gradient, full weight gradients and the collectives
    issued in forward and in backward.
    """
    import torch
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    sp = ln_g is not None
    d, d_ff = w1.shape
    model = _torch_norm_mlp(d, d_ff, sp, eps)
    with torch.no_grad():
        model.fc1.weight.copy_(torch.from_numpy(w1.T.copy()))
        model.fc2.weight.copy_(torch.from_numpy(w2.T.copy()))
        if sp:
            model.norm.weight.copy_(torch.from_numpy(ln_g))
            model.norm.bias.copy_(torch.from_numpy(ln_b))
    mesh = DeviceMesh("cpu", list(range(comm.size)))
    if sp:
        plan = {"norm": SequenceParallel(sequence_dim=0),
                "fc1": ColwiseParallel(input_layouts=Shard(0)),
                "fc2": RowwiseParallel(output_layouts=Shard(0))}
    else:
        plan = {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()}
    parallelize_module(model, mesh, plan)
    xt = torch.from_numpy(x.copy()).requires_grad_(True)
    with CollectiveRecorder() as fwd:
        y = model(xt)
    with CollectiveRecorder() as bwd:
        y.backward(torch.from_numpy(dy.copy()))
    grads = {}
    names = {"w1": model.fc1.weight, "w2": model.fc2.weight}
    if sp:
        names.update({"ln_g": model.norm.weight, "ln_b": model.norm.bias})
    with CollectiveRecorder() as assemble:       # gathering the grads is bookkeeping, not a step
        for k, p in names.items():
            g = p.grad
            g = g.full_tensor() if hasattr(g, "full_tensor") else g
            g = g.detach().numpy()
            grads[k] = g.T.copy() if k in ("w1", "w2") else g.copy()
    y_local = y.to_local() if hasattr(y, "to_local") else y
    return {"y": y_local.detach().numpy().copy(), "dx": xt.grad.detach().numpy().copy(),
            "grads": grads, "forward": fwd.calls, "backward": bwd.calls,
            "assemble": assemble.calls}


# --------------------------------------------------------------------------------------------
# torch.distributed.pipelining
# --------------------------------------------------------------------------------------------
def _pipeline_layers(weights: list[np.ndarray]) -> Any:
    import torch
    from torch import nn

    layers = []
    for w in weights:
        lin = nn.Linear(w.shape[0], w.shape[1], bias=False, dtype=torch.float64)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w.T.copy()))
        layers += [lin, nn.Tanh()]
    return nn.Sequential(*layers)


def _mse(out, target):
    return ((out - target) ** 2).mean()


def pipeline_reference(weights: list[np.ndarray], x: np.ndarray, target: np.ndarray
                       ) -> dict[str, Any]:
    """One process: the whole model (Linear+tanh per weight), full batch, mean squared error."""
    import torch

    model = _pipeline_layers(weights)
    loss = _mse(model(torch.from_numpy(x)), torch.from_numpy(target))
    loss.backward()
    grads = [m.weight.grad.detach().numpy().T.copy() for m in model if hasattr(m, "weight")]
    return {"loss": float(loss.detach()), "grads": grads}


def pipeline_step(weights: list[np.ndarray], x: np.ndarray, target: np.ndarray,
                  microbatches: int, schedule: str = "gpipe", *, comm: Any) -> dict[str, Any]:
    """This rank's stage (its slice of ``weights``, Linear+tanh each) through PyTorch's
    ``ScheduleGPipe`` or ``Schedule1F1B``: returns the micro-batch losses (last stage), the
    stage's weight gradients and the order it ran its chunks, e.g. ``["F0", "F1", "B0", ...]``."""
    import torch
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    classes = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}
    if schedule not in classes:
        raise ValueError(f"schedule={schedule!r}: use 'gpipe' or '1f1b'")
    P, r = comm.size, comm.rank
    if len(weights) % P:
        raise ValueError(f"{len(weights)} layers do not split evenly over {P} stages: use a "
                         f"multiple of {P} layers")
    k = len(weights) // P
    stage_mod = _pipeline_layers(weights[r * k:(r + 1) * k])
    stage = PipelineStage(stage_mod, r, P, torch.device("cpu"))
    order: list[str] = []
    fwd, bwd = stage.forward_one_chunk, stage.backward_one_chunk

    def forward_one_chunk(chunk_id, *a, **kw):
        order.append(f"F{chunk_id}")
        return fwd(chunk_id, *a, **kw)

    def backward_one_chunk(chunk_id, *a, **kw):
        order.append(f"B{chunk_id}")
        return bwd(chunk_id, *a, **kw)

    stage.forward_one_chunk = forward_one_chunk
    stage.backward_one_chunk = backward_one_chunk
    sched = classes[schedule](stage, n_microbatches=microbatches, loss_fn=_mse)
    losses: list[Any] = []
    if r == 0:
        sched.step(torch.from_numpy(x))
    elif r == P - 1:
        sched.step(target=torch.from_numpy(target), losses=losses)
    else:
        sched.step()
    grads = [m.weight.grad.detach().numpy().T.copy() for m in stage_mod if hasattr(m, "weight")]
    return {"losses": [float(v.detach()) for v in losses], "grads": grads, "order": order}


# --------------------------------------------------------------------------------------------
# timing
# --------------------------------------------------------------------------------------------
def time_all_reduce(sizes_bytes: list[int], repeats: int = 20, warmup: int = 3, *,
                    comm: Any) -> list[float]:
    """Median wall-clock seconds of one all-reduce of each size (float32 buffers) on this rank,
    each repetition started after a barrier."""
    import torch

    dist = comm.dist
    out = []
    for nbytes in sizes_bytes:
        t = torch.ones(max(1, int(nbytes) // 4), dtype=torch.float32)
        for _ in range(warmup):
            dist.all_reduce(t, group=comm.group)
        times = []
        for _ in range(repeats):
            dist.barrier(group=comm.group)
            t0 = time.perf_counter()
            dist.all_reduce(t, group=comm.group)
            times.append(time.perf_counter() - t0)
        out.append(float(np.median(times)))
    return out
