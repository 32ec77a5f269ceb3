"""Spawn P ``torch.distributed`` processes on this machine and run rank-local programs on them.

:class:`World` starts ``size`` processes, each joins a process group
through a loopback TCP rendezvous (``tcp://127.0.0.1:<free port>``) and then waits for
programs; ``world.run(fn, args)`` calls ``fn(*args[r], comm=TorchCommunicator)`` on every rank
and returns the results in rank order. One world can run many programs, so a test suite pays
the start-up once. :func:`spmd` is the one-shot form, with
the same signature as :func:`tpp.collectives.spmd`.

The ranks are forked from multiprocessing's fork server, which imports torch (and the
``torch.distributed`` parts the programs use) once, when the first world starts (:data:`PRELOAD`),
instead of once per rank; ``spawn`` where there is no fork server. A rank that is told to stop
flushes its results and leaves without the interpreter's teardown, which takes seconds with torch
loaded. (Both measured by tests/test_distributed.py's module fixture: 18-30 s -> 5-7 s.)

Every wait has a deadline: joining the process group (``timeout``), each run (``timeout``),
the shutdown (a few seconds, then ``terminate`` and ``kill``). A rank that raises makes
``run`` raise ``RuntimeError`` with that rank's traceback, and the world is shut down (the other
ranks may be stuck in a collective). Processes are always reaped: ``with World(...)`` or
``close()``; a worker whose parent died exits by itself.

On GPUs the same programs run under ``torchrun`` instead (see :data:`TORCHRUN_NOTE`).
"""

from __future__ import annotations

import contextlib
import os
import queue
import socket
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from tpp.collectives.comm import check_spmd_args

from .comm import TorchCommunicator, require_torch

__all__ = ["BACKENDS", "TORCHRUN_NOTE", "World", "preload", "spmd"]

BACKENDS = ("gloo", "nccl")
DEFAULT_TIMEOUT = 120.0
PRELOAD = ("__main__", "torch", "torch.distributed", "torch.distributed.tensor.parallel",
           "torch.distributed.pipelining")
"""What the fork server imports before it forks the ranks (``__main__`` as ``spawn`` would)."""

TORCHRUN_NOTE = """\
On GPUs, one process per GPU, across nodes (the NCCL path; it needs GPUs, which the
machines that build this book do not have):

    torchrun --nnodes=2 --nproc-per-node=8 --node-rank=$NODE_RANK \\
             --rdzv-backend=c10d --rdzv-endpoint=$HEAD_NODE:29500 train.py

torchrun sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT in each process; the
script then does

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    torch.distributed.init_process_group("nccl", timeout=timedelta(seconds=600))
    comm = tpp.distributed.TorchCommunicator(device=f"cuda:{local_rank}")
    y, cache = sharded_mlp_forward(x, w1[rank], w2[rank], comm=comm)

and calls the same per-rank programs. Tensor parallelism belongs inside a node (NVLink): build
the TP group from the ranks of one node with torch.distributed.new_group or a DeviceMesh."""


def preload() -> None:
    """Start the fork server now, so that it imports torch (:data:`PRELOAD`, seconds of CPU) while
    the caller goes on with other work; the first :class:`World` then finds it ready. Nothing
    happens where there is no fork server (``spawn``) or once it runs."""
    import multiprocessing as mp
    from multiprocessing import forkserver

    if "forkserver" not in mp.get_all_start_methods():
        return
    mp.get_context("forkserver").set_forkserver_preload(list(PRELOAD))
    forkserver.ensure_running()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(rank: int, size: int, backend: str, port: int, timeout: float, parent: int,
            tasks: Any, results: Any) -> None:
    """The loop of one rank: join the group, then run programs until told to stop."""
    dist = None
    stopped = False
    try:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        warnings.filterwarnings("ignore", module=r"torch(\.|$)")  # keep notebooks' stderr clean
        torch = require_torch()
        torch.set_num_threads(1)
        dist = torch.distributed
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=size, timeout=timedelta(seconds=timeout))
        device = "cpu"
        if backend == "nccl":
            device = f"cuda:{rank % torch.cuda.device_count()}"
            torch.cuda.set_device(device)
        comm = TorchCommunicator(device=device)
        results.put((rank, "ready", None))
        while True:
            try:
                item = tasks.get(timeout=1.0)
            except queue.Empty:
                if os.getppid() != parent:  # the parent died: do not linger
                    return
                continue
            if item is None:
                stopped = True
                break
            fn, args = item
            try:
                comm.observed.clear()
                results.put((rank, "ok", fn(*args, comm=comm)))
            except BaseException:
                results.put((rank, "error", traceback.format_exc()))
    except BaseException:
        with contextlib.suppress(Exception):
            results.put((rank, "error", traceback.format_exc()))
    finally:
        if dist is not None and dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
    if stopped:  # told to stop: flush every result, then skip the interpreter's teardown
        with contextlib.suppress(Exception):
            results.close()
            results.join_thread()
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(0)


class World:
    """``size`` rank processes in one ``torch.distributed`` group (see the module docstring).

    >>> with World(2) as world:                                   # doctest: +SKIP
    ...     outs = world.run(sharded_mlp_forward, [(x, w1s[r], w2s[r]) for r in range(2)])
    """

    def __init__(self, size: int, backend: str = "gloo", timeout: float = DEFAULT_TIMEOUT
                 ) -> None:
        check_spmd_args(size, None)
        if backend not in BACKENDS:
            raise ValueError(f"backend={backend!r}: use 'gloo' (CPU) or 'nccl' (GPUs)")
        if not timeout > 0:
            raise ValueError(f"timeout={timeout!r} must be > 0 seconds")
        require_torch()
        self.size, self.backend, self.timeout = int(size), backend, float(timeout)
        self._procs: list[Any] = []
        self._tasks: list[Any] = []
        self._results: Any = None

    def __enter__(self) -> World:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Spawn the processes and wait (at most ``timeout`` s) until all joined the group."""
        import multiprocessing as mp

        if self._procs:
            raise ValueError("this World is already started")
        if "forkserver" in mp.get_all_start_methods():
            preload()  # started here unless preload() was called earlier
            ctx = mp.get_context("forkserver")
        else:
            ctx = mp.get_context("spawn")
        port = _free_port()
        self._results = ctx.Queue()
        self._tasks = [ctx.Queue() for _ in range(self.size)]
        for r in range(self.size):
            p = ctx.Process(target=_worker, name=f"tpp-rank{r}", daemon=True,
                            args=(r, self.size, self.backend, port, self.timeout, os.getpid(),
                                  self._tasks[r], self._results))
            p.start()
            self._procs.append(p)
        try:
            self._collect("ready", "joining the process group")
        except BaseException:
            self.close()
            raise

    def _collect(self, expected: str, what: str) -> list[Any]:
        out: list[Any] = [None] * self.size
        got: set[int] = set()
        deadline = time.monotonic() + self.timeout
        while len(got) < self.size:
            left = deadline - time.monotonic()
            if left <= 0:
                missing = sorted(set(range(self.size)) - got)
                raise TimeoutError(f"rank(s) {missing} did not finish {what} within "
                                   f"{self.timeout:g} s: raise timeout= or look for a rank that "
                                   "skipped a collective")
            try:
                rank, status, value = self._results.get(timeout=min(left, 1.0))
            except queue.Empty:
                dead = [r for r, p in enumerate(self._procs)
                        if not p.is_alive() and r not in got]
                if dead:
                    raise RuntimeError(f"rank(s) {dead} exited (code "
                                       f"{[self._procs[r].exitcode for r in dead]}) while "
                                       f"{what}") from None
                continue
            if status == "error":
                raise RuntimeError(f"rank {rank} failed while {what}:\n{value}")
            out[rank] = value
            got.add(rank)
        return out

    def run(self, fn: Callable[..., Any], args: Sequence[Sequence[Any]] | None = None
            ) -> list[Any]:
        """Run ``fn(*args[r], comm=comm)`` on every rank; the results in rank order.

        ``fn`` and the arguments must be picklable (a function defined in a module, not in a
        notebook). On any failure or timeout the world is closed and the error raised.
        """
        if not self._procs:
            raise ValueError("start the World first (use it in a with-statement)")
        per_rank = check_spmd_args(self.size, args)
        for r in range(self.size):
            self._tasks[r].put((fn, per_rank[r]))
        try:
            return self._collect("ok", f"running {getattr(fn, '__name__', fn)!s}")
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop every rank: ask, then terminate, then kill; always reaps the processes."""
        for q in self._tasks:
            with contextlib.suppress(Exception):
                q.put(None)
        deadline = time.monotonic() + 5.0
        for p in self._procs:
            p.join(max(0.0, deadline - time.monotonic()))
        for p in self._procs:
            if p.is_alive():
                p.terminate()
                p.join(2.0)
            if p.is_alive():
                p.kill()
                p.join(2.0)
        for q in [*self._tasks, self._results]:
            if q is not None:
                with contextlib.suppress(Exception):
                    q.close()
                    q.join_thread()
        self._procs, self._tasks, self._results = [], [], None

    @property
    def alive(self) -> list[bool]:
        """Whether each rank's process is running."""
        return [p.is_alive() for p in self._procs]


def spmd(fn: Callable[..., Any], size: int, args: Sequence[Sequence[Any]] | None = None, *,
         backend: str = "gloo", timeout: float = DEFAULT_TIMEOUT) -> list[Any]:
    """Run ``fn(*args[r], comm=comm_r)`` on ``size`` fresh ``torch.distributed`` processes.

    The same contract as :func:`tpp.collectives.spmd`; the processes are started, used once
    and reaped. To run several programs on one set of processes, use :class:`World`.
    """
    check_spmd_args(size, args)
    with World(size, backend=backend, timeout=timeout) as world:
        return world.run(fn, args)
