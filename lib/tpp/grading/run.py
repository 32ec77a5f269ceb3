"""Run a rebuilt notebook in a fresh, resource-limited kernel, cell by cell, and survive it.

Each run starts its own kernel through a private kernelspec (:mod:`tpp.grading.kernelspec`)
whose ``argv`` goes through :mod:`tpp.grading.launcher`: limits set with ``setrlimit`` (hard =
soft), the OS sandbox of :mod:`tpp.grading.sandbox` unless ``Limits.sandbox`` is off, then,
unless ``Limits.guard`` is off, the audit hook of :mod:`tpp.grading.guard` installed before
``ipykernel`` starts in the same process. Cells run with nbclient: errors allowed, a per-cell
timeout, no stdin (``input()`` fails at once), outputs truncated, Unix-socket transport in the
kernel's own folder. A timed-out cell is interrupted; if the kernel does not answer a probe
cell afterwards it is killed. A kernel slower to start than its start-up wait (a busy machine)
is waited for longer, the same kernel, within the submission's budget
(:class:`tpp.grading.kernelspec.FastStartClient`). A kernel that dies (``sys.exit`` is
harmless; ``os._exit`` or a limit kills it) is replaced by a new one, the earlier cells are
replayed and the question retried once; after a second death or a kill the run goes on after
the failed question (see :func:`run_cells`). Every process a kernel started is killed when it
ends: the sandbox's PID namespace dies with it, and without the sandbox
:mod:`tpp.grading.reaper` finds them (the grading process is a child subreaper, so daemons that
double-fork are re-parented to it).
"""

from __future__ import annotations

import logging
import math
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
import psutil
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import run_sync

from tpp.grading import bounds
from tpp.grading.kernelspec import (
    KERNEL_NAME,
    FastStartClient,
    GraderClient,
    StartTimeout,
    guard_config,  # noqa: F401 - re-exported
    kernelspec_dir,
)
from tpp.grading.limits import Limits
from tpp.grading.reaper import (
    _become_subreaper,
    _children,
    _descendants,
    _kill_adopted,
    _kill_group,
    _kill_tree,
)
from tpp.grading.relay import relay_manager_class
from tpp.hardware import cpu_count

PROBE_TIMEOUT = 5
_LOG = logging.getLogger("tpp.grading.nbclient")
_LOG.addHandler(logging.NullHandler())
_LOG.propagate = False


@dataclass
class CellOutcome:
    """What happened to one cell: ok, error, timeout, died or not-run (+ the exception)."""

    status: str
    ename: str = ""
    evalue: str = ""


@dataclass
class RunOutcome:
    """The outcome of a run: one :class:`CellOutcome` per cell, and how the kernel ended."""

    cells: list[CellOutcome]
    died: bool = False
    hung: bool = False
    over_budget: bool = False  # the submission's wall-clock budget ran out (a kernel still
    # starting included): a timeout, never a score
    slow_starts: int = 0  # start-up waits the kernels outlasted (machine load; same kernel)
    exceeded: list[str] = field(default_factory=list)  # bounds hit: memory-limit, pids-limit,
    # message-too-large (see tpp.grading.bounds and kernelspec.FastStartClient)
    reason: str = ""
    duration_s: float = 0.0
    outputs: list[list[dict[str, Any]]] = field(default_factory=list)


def _exit_reason(km: AsyncKernelManager) -> str:
    proc = getattr(getattr(km, "provisioner", None), "process", None)
    code = proc.poll() if proc is not None else None
    if code is None:
        return "the kernel stopped answering"
    if code > 128 and getattr(km, "tpp_sandboxed", False):
        code = 128 - code  # bwrap exits with 128 + the signal that killed the kernel
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = {
            "SIGXCPU": " (CPU-time limit reached)",
            "SIGKILL": " (CPU-time or memory limit)",
        }.get(name, "")
        return f"the kernel was killed by {name}{hint}"
    return f"the kernel exited with code {code}"


def run_cells(
    sources: list[str],
    workdir: Path,
    limits: Limits,
    groups: list[str | None] | None = None,
    replayable: list[bool] | None = None,
    max_restarts: int = 4,
    private: list[bool] | None = None,
) -> RunOutcome:
    """Execute ``sources`` (code cells, in order) in a fresh kernel started in ``workdir``.

    ``groups[i]`` names the question cell ``i`` belongs to (None: setup). When the kernel dies
    in a cell of group ``g``, a new kernel is started, the cells before ``g`` are replayed
    (those with ``replayable[i]``, except failed groups and cells that timed out) and ``g`` is
    tried once more, so that a kernel lost to the machine costs nothing. If ``g`` fails again,
    or the kernel had to be killed after a timeout, execution goes on after ``g``, skipping the
    rest of it: one question's failure does not cost the others. At most ``max_restarts``
    kernels are started after the first; a failure in a setup cell ends the run.
    A kernel alive but not answering within its start-up wait (:func:`startup_wait`: the
    machine is busy) is not the submission's failure: the same kernel is waited for, the wait
    doubling, within the one budget (restarted only if it dies); if the budget runs out first
    the outcome is ``over_budget`` (the row says ``timeout``), never a question left "not run".
    ``private[i]``: cell ``i`` runs without being stored in the kernel's input history
    (``In``, ``_ih``, ``_i<n>``), so that later cells cannot read its source.
    """
    n = len(sources)
    groups = list(groups) if groups is not None else [None] * n
    replayable = list(replayable) if replayable is not None else [True] * n
    first_of = {}
    for i, g in enumerate(groups):
        first_of.setdefault(g, i)
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    for cell, hide in zip(nb.cells, private or [], strict=False):
        cell.metadata["private"] = bool(hide)  # not stored in the kernel's history (In, _ih)
    result = RunOutcome([CellOutcome("not-run") for _ in sources])
    start = time.monotonic()
    deadline = start + limits.budget_s  # one budget for the submission: restarts, replays
    failed: set[str] = set()
    retried: set[object] = set()
    failures: list[tuple[str, str]] = []
    hits: list[str] = []
    pos, restarts = 0, 0
    slow = [0]  # start-up waits outlasted, summed over the kernels
    wait = startup_wait(limits.startup_timeout)
    while pos < n:
        replay = [
            j
            for j in range(pos)
            if replayable[j]
            and groups[j] not in failed
            and result.cells[j].status in ("ok", "error")
        ]
        todo = [i for i in range(pos, n) if groups[i] is None or groups[i] not in failed]
        stop, event = _session(nb, todo, replay, workdir, limits, result.cells, groups,
                               deadline, hits, wait, slow)  # fmt: skip
        if event is None:
            break
        kind, reason = event
        if kind == "budget":
            if slow[0]:
                reason += (f"; the kernel outlasted {slow[0]} start-up wait(s) (the machine's "
                           "load)")  # fmt: skip
            failures.append((kind, reason))
            break
        g = groups[stop] if stop >= 0 else None
        if kind == "tainted":  # g is over, but its kernel may be unusable: a new one for the rest
            failed.add(g)  # type: ignore[arg-type]
            pos = stop + 1
            continue
        key = ("start", pos) if stop < 0 else ("group", g, stop if g is None else None)
        if kind == "died" and key not in retried and restarts < max_restarts:
            retried.add(key)  # once more: the machine, not the submission, may have failed
            restarts += 1
            if stop >= 0:
                pos = stop if g is None else first_of[g]
            continue
        failures.append((kind, reason))
        if stop < 0 or g is None or restarts >= max_restarts:
            break
        failed.add(g)
        restarts += 1
        pos = stop + 1
    result.died = any(k == "died" for k, _ in failures)
    result.hung = any(k == "hung" for k, _ in failures)
    result.over_budget = any(k == "budget" for k, _ in failures)
    result.reason = failures[0][1] if failures else ""
    result.slow_starts = slow[0]
    result.exceeded = sorted(set(hits))
    result.duration_s = time.monotonic() - start
    result.outputs = [list(c.get("outputs", [])) for c in nb.cells]
    return result


def _session(
    nb: nbformat.NotebookNode,
    todo: list[int],
    replay: list[int],
    workdir: Path,
    limits: Limits,
    outcomes: list[CellOutcome],
    groups: list[str | None] | None = None,
    deadline: float = math.inf,
    hits: list[str] | None = None,
    start_wait: float | None = None,
    slow: list[int] | None = None,
) -> tuple[int, tuple[str, str] | None]:
    """One kernel: replay cells silently, then run ``todo``, recording ``outcomes``.

    Returns ``(index, None)`` when all ran, or ``(index, (kind, reason))`` for the cell where the
    kernel died (kind ``died``) or had to be killed after a timeout (``hung``); index ``-1``
    when the kernel failed to start or to replay. Kind ``tainted``: a cell of question
    ``groups[index]`` timed out (and was interrupted) or raised ``MemoryError``, and that
    question is over; the kernel is not trusted with the next question (memory may still be
    held, threads left running), so the session ends at the last cell of that question.
    The bounds the sandbox hit (``memory-limit``, ``pids-limit``, ``message-too-large``) are
    appended to ``hits``. A kernel that does not answer within ``start_wait`` seconds (default
    :func:`startup_wait` of ``limits.startup_timeout``) is waited for longer, up to the
    ``deadline`` (then kind ``budget``); ``slow[0]`` counts the waits it outlasted.
    """
    slow = slow if slow is not None else [0]
    hits = hits if hits is not None else []
    groups = groups if groups is not None else [None] * len(nb.cells)
    tainted: str | None = None
    budget = ("budget", f"the submission's time budget of {limits.budget_s:g} s ran out "
              "(restarts and replays included)")  # fmt: skip

    def cell_timeout() -> int | None:
        """Seconds for the next cell: the per-cell timeout, or what is left of the budget."""
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        client.timeout = max(1, math.ceil(min(limits.timeout, left)))
        return client.timeout

    if deadline - time.monotonic() <= 0:
        return -1, budget
    wait_s = startup_wait(limits.startup_timeout) if start_wait is None else start_wait
    wait_s = max(0.01, min(wait_s, deadline - time.monotonic()))
    replies: dict[int, dict[str, Any]] = {}

    def on_executed(cell: Any = None, cell_index: int = 0, execute_reply: Any = None) -> None:
        if execute_reply is not None:
            replies[cell_index] = execute_reply.get("content", {})

    _become_subreaper()
    adopted_before = set(_children())
    # The kernel's shared folder (the parent of its working folder): connection file and
    # Unix sockets live there, where only this kernel (sandboxed) and the grader can reach them.
    shared = workdir.parent
    token = os.urandom(6).hex()
    manager = relay_manager_class(AsyncKernelManager) if limits.relay else AsyncKernelManager
    km = manager(
        kernel_name=KERNEL_NAME,
        kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernelspec_dir(limits))]),
        transport="ipc",  # Unix sockets: no TCP port, nothing on the network
        ip=str(shared / f"k{token}"),
        connection_file=str(shared / f"kernel-{token}.json"),
        client_class="tpp.grading.kernelspec.FastStartClient",  # no fixed 0.2 s at start-up
    )
    km.tpp_sandboxed = limits.sandbox  # type: ignore[attr-defined]
    km.tpp_max_message_mb = limits.max_message_mb  # type: ignore[attr-defined]
    client = GraderClient(
        nb,
        limits.output_bytes,
        km=km,
        timeout=max(1, math.ceil(limits.timeout)),  # nbclient wants whole seconds
        allow_errors=True,
        interrupt_on_timeout=False,
        record_timing=False,
        startup_timeout=max(1, math.ceil(wait_s)),
        shutdown_kernel="immediate",
        log=_LOG,
    )
    client.on_cell_executed = on_executed
    drops_seen: dict[int, int] = {}

    def dropped() -> bool:
        """True if ZeroMQ dropped a kernel message over the cap since the last call."""
        kc = client.kc
        count = kc.dropped() if hasattr(kc, "dropped") else 0
        relay = getattr(km, "tpp_relay", None)
        count += relay.dropped() if relay is not None else 0
        new = count > drops_seen.get(id(kc), 0)
        drops_seen[id(kc)] = count
        if new:
            hits.append("message-too-large")
        return new

    pids: list[psutil.Process] = []
    pgid: int | None = None
    group = None
    if limits.cgroup:
        try:
            group = bounds.Group(limits.cgroup, limits.memory_mb, limits.nproc, limits.cpus)
        except (OSError, ValueError) as exc:  # the run says so; the rlimits still hold
            _LOG.warning("no cgroup for this kernel: %s", exc)
    FastStartClient.max_message_bytes = limits.max_message_mb * 2**20
    FastStartClient.start_wait_s = wait_s  # nbclient's startup_timeout is whole seconds
    FastStartClient.start_deadline = deadline  # alive but slow: waited for, up to the budget
    # the shared folder on the host disk (no root: no tmpfs): a watchdog bounds it instead
    watch = None if _is_tmpfs(shared) else bounds.DiskWatch(shared, limits.disk_mb)
    kernel: psutil.Process | None = None
    stop, event = -1, None
    finished = False
    try:
        quiet: dict[str, Any] = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        if group is not None:
            quiet["env"] = {**os.environ, **group.env}
        with client.setup_kernel(cwd=str(workdir), **quiet):
            slow[0] += getattr(client.kc, "tpp_slow_waits", 0)
            kernel_pid = getattr(km.provisioner, "pid", None)
            pgid = getattr(km.provisioner, "pgid", None)
            try:
                kernel = psutil.Process(kernel_pid) if kernel_pid else None
            except psutil.Error:
                kernel = None
            if watch is not None:
                watch.pid = kernel_pid
            for j in replay:
                if cell_timeout() is None:
                    return -1, budget
                try:
                    client.execute_cell(
                        nb.cells[j], j, store_history=not nb.cells[j].metadata.get("private")
                    )
                except (DeadKernelError, CellTimeoutError, KeyError, ValueError, TypeError):
                    pids = _descendants(kernel)
                    return -1, ("died", "the kernel failed while replaying earlier cells")
            replies.clear()
            for i in todo:
                if tainted is not None and groups[i] != tainted:
                    event = ("tainted", f"question {tainted} left the kernel unusable")
                    break
                stop = i
                if cell_timeout() is None:
                    event = budget
                    pids = _descendants(kernel)
                    break
                try:
                    client.execute_cell(
                        nb.cells[i], i, store_history=not nb.cells[i].metadata.get("private")
                    )
                except DeadKernelError:
                    relay = getattr(km, "tpp_relay", None)
                    if (relay is not None and relay.died()  # a message it could not hold
                            and _exit_reason(km) == "the kernel stopped answering"):
                        hits.append("message-too-large")
                        outcomes[i] = CellOutcome("timeout", "message-too-large")
                        why = (f"the kernel sent more than its relay could hold ({relay.limit_mb}"
                               f" MiB): a message over {limits.max_message_mb} MiB, or many")
                        # the kernel is not at fault as a process: this question is over, the
                        # next ones get a new kernel (and relay), no retry of the same cell
                        event = ("tainted", why) if groups[i] is not None else ("died", why)
                        pids = _descendants(kernel)
                        break
                    outcomes[i] = CellOutcome("died")
                    event = ("died", _exit_reason(km))
                    break
                except (KeyError, ValueError, TypeError):
                    # a message nbclient cannot read: the kernel's messaging was tampered with
                    outcomes[i] = CellOutcome("died")
                    event = ("died", "the kernel broke the Jupyter protocol")
                    pids = _descendants(kernel)
                    break
                except CellTimeoutError:
                    # the cell's wait was what was left of the budget (shorter than --timeout)
                    short = client.timeout < limits.timeout
                    outcomes[i] = CellOutcome(
                        "timeout", "message-too-large" if dropped() else ("budget" if short else "")
                    )
                    if deadline - time.monotonic() <= 0.5:
                        event = budget
                        pids = _descendants(kernel)
                        break
                    if not _recover(client, km, i):
                        event = ("hung", "the kernel did not stop after a timeout and an interrupt")
                        pids = _descendants(kernel)
                        break
                    tainted = groups[i] or tainted
                    continue
                dropped()  # the output lost, the cell finished: the row still says so
                reply = replies.pop(i, {})
                if reply.get("status") == "error":
                    if reply.get("ename") == "MemoryError":
                        tainted = groups[i] or tainted
                    outcomes[i] = CellOutcome(
                        "error", str(reply.get("ename", ""))[:200], str(reply.get("evalue", ""))
                    )
                else:
                    outcomes[i] = CellOutcome("ok")
            if not pids:
                pids = _descendants(kernel)
            finished = event is None
    except DeadKernelError:  # at start-up (or at shutdown: then it does not matter)
        if not finished:
            event = event or ("died", _exit_reason(km))
    except (KeyError, ValueError, TypeError):  # while shutting a broken kernel down
        if not finished:
            event = event or ("died", "the kernel broke the Jupyter protocol")
    except StartTimeout as exc:  # alive, but still starting when the budget ran out
        slow[0] += exc.waits
        stop, event = -1, ("budget", f"{budget[1]} while the kernel was starting: {exc}"[:300])
    except RuntimeError as exc:  # the kernel did not start
        stop, event = -1, ("died", f"the kernel failed to start: {str(exc)[:200]}")
    finally:
        if watch is not None:
            watch.close()
            if watch.hit:
                hits.append("disk-limit")
                if event is not None and event[0] == "died":
                    event = ("died", f"the kernel's shared folder reached {limits.disk_mb} MiB")
        if group is not None:
            hit = group.exceeded()
            hits.extend(hit)
            if event is not None and event[0] == "died" and "memory-limit" in hit:
                event = ("died", f"the sandbox reached its memory limit of {limits.memory_mb} MiB")
            group.close()
        _kill_tree(pids)
        _kill_group(pgid, kernel)
        relay = getattr(km, "tpp_relay", None)
        keep = set(adopted_before)  # the relay ends after the client's channels (below)
        if relay is not None:
            keep |= {key for key in _children() if key[0] == relay.proc.pid}
        _kill_adopted(keep)
        if watch is not None and watch.hit:
            watch.settle()  # what the kernel wrote while it was being killed
        _close_zmq(client, km)
        if relay is not None:
            relay.close()
        for p in shared.glob(f"*{token}*"):
            try:
                p.unlink()
            except OSError:
                pass
    return stop, event


def _close_zmq(client: GraderClient, km: AsyncKernelManager) -> None:
    """End the client's and the manager's ZeroMQ contexts. nbclient leaves them to the owner of
    the kernel manager (the grader passes its own ``km``, so nbclient's cleanup is off), and an
    unended context keeps its I/O thread's epoll and eventfds: ~28 descriptors per submission
    until a long grading run (or test session) met ``EMFILE`` (Too many open files)."""
    kc = getattr(client, "kc", None)
    if kc is not None:
        try:
            kc.stop_channels()
        except Exception:  # noqa: BLE001 - a broken kernel's channels must not fail the row
            pass
        client.kc = None
    for ctx in (getattr(kc, "context", None), getattr(km, "context", None)):
        if ctx is not None and not ctx.closed:
            try:
                ctx.destroy(linger=0)
            except Exception:  # noqa: BLE001
                pass


def _is_tmpfs(path: Path) -> bool:
    """True if ``path`` is the root of a ``tmpfs`` (the grader mounted one for the kernel)."""
    try:
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                parts = line.split()
                sep = parts.index("-")
                if parts[4] == os.path.realpath(path) and parts[sep + 1] == "tmpfs":
                    return True
    except (OSError, ValueError, IndexError):
        pass
    return False


def _recover(client: GraderClient, km: AsyncKernelManager, index: int) -> bool:
    """Interrupt the kernel after a timeout; True if it then runs a trivial cell promptly."""
    original = client.nb.cells[index]
    try:
        run_sync(km.interrupt_kernel)()
        # A fresh client: the cancelled output poller of the timed-out cell may still hold
        # a pending receive on the old IOPub socket, which would swallow later messages.
        client.kc.stop_channels()
        client.kc = km.client()
        client.kc.start_channels()  # no wait_for_ready: a busy kernel would block it
        client.kc.allow_stdin = False
        probe = nbformat.v4.new_code_cell("pass")
        saved, client.timeout = client.timeout, PROBE_TIMEOUT
        try:
            client.execute_cell(probe, index)
        finally:
            client.timeout = saved
        return True
    except (CellTimeoutError, DeadKernelError, RuntimeError):
        return False
    finally:
        client.nb.cells[index] = original


def startup_wait(seconds: float) -> float:
    """A start-up wait that scales with the machine's load: ``seconds`` times the load per core
    (at least 1), so that a busy machine makes grading slower, never wrong. The load is the
    larger of the 1-minute load average and the tasks runnable now (``/proc/loadavg``, this
    one excluded): the average lags a load that just began (a test run starting) by a minute."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # pragma: no cover - no load average
        load = 1.0
    load = max(load, runnable_now() - 1)
    return seconds * max(1.0, load / cpu_count())


def runnable_now() -> int:
    """Tasks runnable at this instant (the 4th field of ``/proc/loadavg``); 0 if unknown."""
    try:
        with open("/proc/loadavg") as fh:
            return int(fh.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return 0


