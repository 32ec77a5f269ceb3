"""The bounds of one grading run (:class:`Limits`): read by the kernelspec, the runner, the rows
and the reference cache. A module of its own so that none of them imports another for it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """Per-run limits: seconds per cell, memory (MiB: of the sandbox under a cgroup, else the
    address space of each kernel process), CPU seconds, output bytes;
    whether the kernel runs under :mod:`tpp.grading.guard`, and the folders it must not read."""

    timeout: float = 30.0
    memory_mb: int = 2048
    cpu_seconds: int = 120
    file_mb: int = 64
    output_bytes: int = 20_000
    guard: bool = True
    protect: tuple[str, ...] = ()  # extra read-protected folders (solutions, results)
    sandbox: bool = True  # run each kernel in bubblewrap (see tpp.grading.sandbox)
    nproc: int = 64  # processes + threads of a sandboxed kernel (the whole sandbox: cgroup)
    startup_timeout: float = 30.0  # seconds for a kernel to start (scaled with the load)
    budget_s: float = 600.0  # wall-clock seconds per submission, restarts and replays included
    disk_mb: int = 256  # each writable filesystem of the kernel (shared folder, work, /tmp)
    cpus: float = 1.0  # CPU bandwidth of the whole sandbox (cgroup cpu quota), in cores
    cgroup: str = ""  # "v1" / "v2": memory, pids and CPU bounded for the whole sandbox
    max_message_mb: int = 16  # largest whole kernel message the grader keeps (all frames)
    max_notebook_mb: float = 10.0  # largest submission file read
    max_cells: int = 2_000  # most cells a submission may have
    max_source_chars: int = 200_000  # longest cell source of a submission
    relay: bool = True  # each kernel's sockets read by a relay process (tpp.grading.relay)
