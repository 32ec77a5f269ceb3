"""Rank-local programs on a communicator, and the simulated engine that runs them.

Megatron-LM and picotron write a layer as the program of ONE rank: it holds its shards and
calls collectives on a communicator. :class:`Communicator` is that interface (the methods a
per-rank program may call); two engines implement it:

* :class:`SimulatedCommunicator` (here): :func:`spmd` runs the P rank programs as threads of
  this process. They meet at every collective: each rank leaves its input, and the LAST rank to
  arrive runs the step-by-step ring of :class:`~tpp.collectives.ProcessGroup` on all inputs,
  records the ledger once, and hands every rank its result. Ledgers are therefore exactly those
  of the list-of-arrays API, in program order, and deterministic.
* :class:`tpp.distributed.TorchCommunicator`: one process per rank, ``torch.distributed``
  (gloo on CPU, NCCL on GPUs), the same method names.

Example (the program of one rank; ``comm`` is passed by keyword)::

    def mlp_forward(x, w1_shard, w2_shard, comm):
        z = gelu(x @ w1_shard) @ w2_shard
        return comm.all_reduce(z, tag="g.forward")

    outs = spmd(mlp_forward, 4, args=[(x, w1s[r], w2s[r]) for r in range(4)])
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .group import ProcessGroup, group_of_size

__all__ = ["Communicator", "SimulatedCommunicator", "SimulatedWorld", "check_spmd_args", "spmd"]

#: Seconds a simulated rank waits for the others at a collective before giving up.
DEFAULT_TIMEOUT = 60.0


@runtime_checkable
class Communicator(Protocol):
    """What a per-rank program may call. ``rank`` in 0..size-1; arrays are numpy arrays.

    The semantics are those of :class:`~tpp.collectives.ProcessGroup` seen from one rank:
    ``all_reduce`` returns the reduction of every rank's ``x``; ``reduce_scatter`` this rank's
    slice (along ``axis``) of it; ``all_gather`` the concatenation along ``axis``;
    ``all_to_all`` slice ``rank`` of every rank's ``x``, concatenated; ``broadcast`` root's ``x``.
    ``tag`` names the call site on the ledger (e.g. ``"g.forward"``).
    """

    rank: int
    size: int

    def all_reduce(self, x: np.ndarray, op: str = "sum", *, tag: str = "") -> np.ndarray: ...

    def reduce_scatter(self, x: np.ndarray, axis: int = 0, op: str = "sum", *,
                       tag: str = "") -> np.ndarray: ...

    def all_gather(self, x: np.ndarray, axis: int = 0, *, tag: str = "") -> np.ndarray: ...

    def all_to_all(self, x: np.ndarray, axis: int = 0, *, tag: str = "") -> np.ndarray: ...

    def broadcast(self, x: np.ndarray | None, root: int = 0, *, tag: str = "") -> np.ndarray: ...

    def barrier(self) -> None: ...

    def new_subgroups(self, groups: Sequence[Sequence[int]], name: str = "sub"
                      ) -> Communicator | None: ...


class _Aborted(RuntimeError):
    """Raised in the ranks still waiting when another rank failed."""


class SimulatedWorld:
    """The meeting point of ``group.size`` rank threads; collectives run on ``group``.

    Every collective is a rendezvous: ranks deposit ``(op, params, payload)``; the last to
    arrive checks that all called the same op with the same parameters, runs the
    :class:`ProcessGroup` method on the list of payloads (which records the ledger once) and
    wakes the others. A rank waiting longer than ``timeout`` seconds raises ``TimeoutError``
    naming the ranks that never arrived; if one rank fails, the waiting ranks are released.
    """

    def __init__(self, group: ProcessGroup, timeout: float = DEFAULT_TIMEOUT) -> None:
        if not isinstance(group, ProcessGroup):
            raise ValueError(f"group must be a tpp.collectives.ProcessGroup, got {group!r}")
        if not timeout > 0:
            raise ValueError(f"timeout={timeout!r} must be > 0 seconds")
        self.group, self.size, self.timeout = group, group.size, float(timeout)
        self._cond = threading.Condition()
        self._calls: dict[int, tuple[str, tuple, Any]] = {}
        self._results: list[Any] | None = None
        self._error: BaseException | None = None
        self._generation = 0
        self._failed: BaseException | None = None
        self.subgroups: list[ProcessGroup] = []

    def communicator(self, rank: int) -> SimulatedCommunicator:
        """The communicator rank ``rank`` uses in its program."""
        return SimulatedCommunicator(self, rank)

    def abort(self, exc: BaseException) -> None:
        """Release every waiting rank (they raise); called when one rank's program failed."""
        with self._cond:
            if self._failed is None:
                self._failed = exc
            self._cond.notify_all()

    def meet(self, rank: int, op: str, params: tuple, payload: Any,
             run: Callable[[list[Any]], list[Any]]) -> Any:
        """Deposit this rank's call; the last arrival runs ``run(payloads)``; return ours."""
        with self._cond:
            if self._failed is not None:
                raise _Aborted(f"rank {rank}: another rank failed ({self._failed!r})")
            gen = self._generation
            self._calls[rank] = (op, params, payload)
            if len(self._calls) == self.size:
                calls = [self._calls[r] for r in range(self.size)]
                self._calls = {}
                self._results, self._error = None, None
                try:
                    for r, (op_r, params_r, _) in enumerate(calls):
                        if (op_r, params_r) != (calls[0][0], calls[0][1]):
                            raise ValueError(
                                f"rank {r} called {op_r}{params_r} but rank 0 called "
                                f"{calls[0][0]}{calls[0][1]}: every rank must call the same "
                                "collectives, with the same arguments, in the same order")
                    self._results = run([c[2] for c in calls])
                except BaseException as exc:  # every rank of this collective raises it
                    self._error = exc
                self._generation += 1
                self._cond.notify_all()
            else:
                ok = self._cond.wait_for(
                    lambda: self._generation != gen or self._failed is not None,
                    timeout=self.timeout)
                if self._generation == gen:
                    if self._failed is not None:
                        raise _Aborted(f"rank {rank}: another rank failed ({self._failed!r})")
                    if not ok:
                        missing = sorted(set(range(self.size)) - set(self._calls))
                        raise TimeoutError(
                            f"rank {rank} waited {self.timeout:g} s in {op} for rank(s) "
                            f"{missing}, which never called it: every rank must call the same "
                            "collectives (or raise the timeout)")
            if self._error is not None:
                raise self._error
            return self._results[rank]


class SimulatedCommunicator:
    """Rank ``rank``'s view of a :class:`SimulatedWorld` (implements :class:`Communicator`)."""

    def __init__(self, world: SimulatedWorld, rank: int) -> None:
        if not 0 <= rank < world.size:
            raise ValueError(f"rank={rank} is not a rank of a world of size {world.size}")
        self.world, self.rank, self.size = world, int(rank), world.size

    @property
    def group(self) -> ProcessGroup:
        """The simulated process group whose ledger records this world's collectives."""
        return self.world.group

    def __repr__(self) -> str:
        return f"SimulatedCommunicator(rank={self.rank}, size={self.size})"

    def all_reduce(self, x: np.ndarray, op: str = "sum", *, tag: str = "") -> np.ndarray:
        return self.world.meet(self.rank, "all_reduce", (op, tag), x,
                               lambda xs: self.group.all_reduce(xs, op, tag=tag))

    def reduce_scatter(self, x: np.ndarray, axis: int = 0, op: str = "sum", *,
                       tag: str = "") -> np.ndarray:
        return self.world.meet(self.rank, "reduce_scatter", (axis, op, tag), x,
                               lambda xs: self.group.reduce_scatter(xs, axis, op, tag=tag))

    def all_gather(self, x: np.ndarray, axis: int = 0, *, tag: str = "") -> np.ndarray:
        return self.world.meet(self.rank, "all_gather", (axis, tag), x,
                               lambda xs: self.group.all_gather(xs, axis, tag=tag))

    def all_to_all(self, x: np.ndarray, axis: int = 0, *, tag: str = "") -> np.ndarray:
        return self.world.meet(self.rank, "all_to_all", (axis, tag), x,
                               lambda xs: self.group.all_to_all(xs, axis, tag=tag))

    def broadcast(self, x: np.ndarray | None, root: int = 0, *, tag: str = "") -> np.ndarray:
        return self.world.meet(self.rank, "broadcast", (root, tag), x,
                               lambda xs: self.group.broadcast(xs, root, tag=tag))

    def barrier(self) -> None:
        self.world.meet(self.rank, "barrier", (), None, lambda xs: [None] * len(xs))

    def new_subgroups(self, groups: Sequence[Sequence[int]], name: str = "sub"
                      ) -> SimulatedCommunicator | None:
        """Collective: split the world into disjoint ``groups`` of ranks (every rank passes the
        same list); returns this rank's communicator in its group (None if in none). Each new
        group gets its own :class:`ProcessGroup` (listed in ``world.subgroups``)."""
        key = tuple(tuple(int(r) for r in g) for g in groups)
        seen = [r for g in key for r in g]
        if len(seen) != len(set(seen)) or not all(0 <= r < self.size for r in seen):
            raise ValueError(f"groups={key} must be disjoint lists of ranks in 0..{self.size - 1}")

        def make(_: list[Any]) -> list[Any]:
            worlds = [SimulatedWorld(ProcessGroup(len(g), name=f"{name}{i}"), self.world.timeout)
                      for i, g in enumerate(key)]
            self.world.subgroups.extend(w.group for w in worlds)
            out: list[Any] = [None] * self.size
            for w, g in zip(worlds, key, strict=True):
                for i, r in enumerate(g):
                    out[r] = w.communicator(i)
            return out

        return self.world.meet(self.rank, "new_subgroups", (key, name), None, make)


def check_spmd_args(size: int, args: Sequence[Sequence[Any]] | None) -> list[tuple]:
    """Validate ``size`` and the per-rank positional arguments; ValueError says what to change."""
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise ValueError(f"size={size!r} must be a positive integer number of ranks")
    if args is None:
        return [()] * int(size)
    if isinstance(args, (str, bytes, np.ndarray)) or not isinstance(args, Sequence):
        raise ValueError("args must be a list with one tuple of positional arguments per rank")
    if len(args) != size:
        raise ValueError(f"args has {len(args)} entries for size={size}: pass one tuple of "
                         "positional arguments per rank")
    return [tuple(a) for a in args]


def spmd(fn: Callable[..., Any], size: int, args: Sequence[Sequence[Any]] | None = None, *,
         group: ProcessGroup | None = None, timeout: float = DEFAULT_TIMEOUT) -> list[Any]:
    """Run ``fn(*args[r], comm=comm_r)`` for every rank r on simulated ranks; return the results.

    ``group``: the :class:`ProcessGroup` whose ledger records the collectives (a new one named
    ``"spmd"`` by default). A failing rank's exception is re-raised here (the others are
    released); a rank stuck at a collective raises ``TimeoutError`` after ``timeout`` seconds.
    """
    per_rank = check_spmd_args(size, args)
    group = group_of_size(group, int(size), label="size", name="spmd")
    world = SimulatedWorld(group, timeout)
    if size == 1:
        return [fn(*per_rank[0], comm=world.communicator(0))]
    results: list[Any] = [None] * size
    errors: list[BaseException | None] = [None] * size

    def body(r: int) -> None:
        try:
            results[r] = fn(*per_rank[r], comm=world.communicator(r))
        except BaseException as exc:
            errors[r] = exc
            world.abort(exc)

    threads = [threading.Thread(target=body, args=(r,), name=f"rank{r}", daemon=True)
               for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 5.0)
    if any(t.is_alive() for t in threads):
        world.abort(TimeoutError("spmd join timed out"))
        raise TimeoutError(f"spmd: rank(s) {[r for r, t in enumerate(threads) if t.is_alive()]}"
                           f" did not finish within {timeout:g} s")
    real = [e for e in errors if e is not None and not isinstance(e, _Aborted)]
    if real:
        raise real[0]
    if any(e is not None for e in errors):
        raise next(e for e in errors if e is not None)
    return results
