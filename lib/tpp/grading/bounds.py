"""Bounds for a whole submission, not one process: its disk on a size-limited ``tmpfs``, and its
memory, processes and CPU in a control group of its own.

- **Disk**: the kernel's shared folder (connection file, sockets, answers files) is a fresh
  ``tmpfs`` of ``Limits.disk_mb`` mounted by the grader (root) on the host, and the sandbox's
  ``work/`` and ``/tmp`` are ``tmpfs`` of the same size inside it (:mod:`tpp.grading.sandbox`):
  a kernel that fills them fills only its own, never the host disk. Without root the shared
  folder stays on the host disk (the grader must reach its sockets and answers files, so it
  cannot be a mount of the sandbox's own): :class:`DiskWatch` bounds it instead, and
  ``RLIMIT_FSIZE`` bounds each file; :func:`describe` says so.
- **Memory, processes, CPU**: every process of the sandbox is in one cgroup (v2 where the
  machine offers its controllers, else v1 ``memory``, ``pids``, ``cpu``), joined by the launcher
  before it starts ``bwrap``: ``memory.max`` / ``memory.limit_in_bytes`` = ``memory_mb``,
  ``pids.max`` = ``nproc`` (threads included), a CPU quota of ``cpus`` cores. Forked children
  share the bound. :class:`Group` reports which bound was hit (``memory-limit``,
  ``pids-limit``), and the row says so. Where no cgroup is writable the per-process rlimits of
  :mod:`tpp.grading.launcher` remain, and :func:`describe` says so in one line.

A grader killed outright (``SIGKILL``) cannot remove its groups: :func:`sweep`, at the start of
each grading run, removes the groups whose grader is gone and whose processes are gone.

Only the standard library: the launcher reads :data:`ENV` itself.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import secrets
import signal
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
ENV = "TPP_CGROUP_PROCS"  # ':'-separated cgroup.procs files the launcher joins
_PARENT = "tpp-grade"
# a group's name says which grader made it: k<pid>-<hex>. Groups named k<hex> (before the
# owner was in the name) are stale once empty and older than this
LEGACY_AGE_S = 3600.0
_OWNED = re.compile(r"k(\d+)-[0-9a-f]+")


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def mount_tmpfs(path: Path, size_mb: int) -> bool:
    """Mount a ``tmpfs`` of ``size_mb`` MiB on ``path`` (root only); False where it cannot."""
    if os.getuid() != 0 or size_mb <= 0:
        return False
    opts = f"size={int(size_mb)}m,mode=0700".encode()
    flags = 2 | 4 | 8  # nosuid, nodev, noexec
    return _libc().mount(b"tmpfs", str(path).encode(), b"tmpfs", flags, opts) == 0


def unmount(path: Path) -> None:
    _libc().umount2(str(path).encode(), 2)  # MNT_DETACH


def _writable(p: Path) -> bool:
    return p.is_dir() and os.access(p, os.W_OK)


@functools.lru_cache(maxsize=1)
def detect() -> tuple[str, str]:
    """``("v2" | "v1" | "", why not)``: which cgroup hierarchy can bound a sandbox here."""
    if os.getuid() != 0:
        return "", "not root: no cgroup to bound the whole sandbox"
    ctl = ROOT / "cgroup.controllers"
    if ctl.is_file():
        have = set(ctl.read_text().split())
        if {"memory", "pids", "cpu"} <= have and _writable(ROOT):
            return "v2", ""
    unified = ROOT / "unified" / "cgroup.controllers"
    if unified.is_file() and {"memory", "pids"} <= set(unified.read_text().split()):
        pass  # a hybrid unified hierarchy with controllers is not used: v1 below is simpler
    if all(_writable(ROOT / c) for c in ("memory", "pids", "cpu")):
        return "v1", ""
    return "", "no writable cgroup (v2 controllers or v1 memory, pids, cpu)"


def describe(requested: bool = True) -> str:
    """One line for the run's summary when the sandbox is not bounded as a whole ("" when a
    cgroup bounds it): why, and what holds instead."""
    mode, why = detect()
    if mode and requested:
        return ""
    if not requested:
        why = "--no-cgroups"
    disk = "" if os.getuid() == 0 else "; the kernel's shared folder on the host disk, watched"
    return (f"memory, processes and CPU bounded per kernel process only ({why}: rlimits "
            f"RLIMIT_AS, RLIMIT_NPROC, RLIMIT_CPU){disk}")


# Address space a kernel needs beyond the memory it uses: with numpy imported, an idle kernel
# holds ~745 MiB of address space for ~70 MiB resident (11 threads, each an 8 MiB stack and a
# malloc arena; shared libraries). Under a cgroup the memory bound is the group's (resident
# memory of the whole sandbox, page cache and tmpfs included); RLIMIT_AS only keeps a single
# huge allocation a MemoryError, so it gets this headroom instead of being the bound itself.
ADDRESS_HEADROOM_MB = 1024
# The least --memory-mb a kernel starts with: ~290 MiB of address space at start-up (numpy
# imported, MALLOC_ARENA_MAX=2), the bound of a process where no cgroup is writable.
MIN_MEMORY_MB = 384
# Tasks (processes and threads) of a sandbox at start-up: bwrap (2), the kernel's 11 threads.
START_TASKS = 13


def address_space_mb(memory_mb: int, grouped: bool) -> int:
    """``RLIMIT_AS`` of each kernel process: the memory bound itself without a cgroup, the
    memory bound plus :data:`ADDRESS_HEADROOM_MB` when a cgroup bounds the whole sandbox."""
    return memory_mb + ADDRESS_HEADROOM_MB if grouped else memory_mb


def _counter(path: Path, key: str) -> int:
    """The value of ``key`` in a flat-keyed cgroup file (``memory.events``, ``pids.events``)."""
    try:
        text = path.read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        k, _, v = line.partition(" ")
        if k == key:
            try:
                return int(v)
            except ValueError:
                return 0
    return 0


class Group:
    """One submission's cgroup(s): created, joined by the launcher, read, killed and removed.

    v2: one group with ``memory.max`` (and ``memory.swap.max`` 0), ``pids.max``, ``cpu.max``.
    v1: a group in each of the ``memory`` (``memory.limit_in_bytes`` and, where swap is
    accounted, ``memory.memsw.limit_in_bytes``), ``pids`` (``pids.max``) and ``cpu``
    (``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``) hierarchies. ``pids.max`` counts threads
    too: a kernel starts with :data:`START_TASKS`, so ``nproc`` must leave room above that.
    """

    PERIOD_US = 100_000

    def __init__(self, mode: str, memory_mb: int, nproc: int, cpus: float) -> None:
        if nproc <= START_TASKS:
            raise ValueError(f"nproc={nproc} leaves no thread for the kernel (it starts with "
                             f"{START_TASKS} tasks): pass --nproc 32 or more")  # fmt: skip
        self.mode = mode
        name = f"k{os.getpid()}-{secrets.token_hex(6)}"  # the owner, for sweep()
        self.dirs: list[Path] = []
        self.by_controller: dict[str, Path] = {}
        quota = max(1000, int(cpus * self.PERIOD_US))
        if mode == "v2":
            parent = ROOT / _PARENT
            parent.mkdir(exist_ok=True)
            for f in (ROOT / "cgroup.subtree_control", parent / "cgroup.subtree_control"):
                try:
                    f.write_text("+memory +pids +cpu")
                except OSError:
                    pass
            d = parent / name
            d.mkdir()
            self.dirs = [d]
            self.by_controller = {"memory": d, "pids": d, "cpu": d}
            _write(d / "memory.max", str(memory_mb * 2**20))
            _write(d / "memory.swap.max", "0")
            _write(d / "pids.max", str(nproc))
            _write(d / "cpu.max", f"{quota} {self.PERIOD_US}")
        elif mode == "v1":
            for ctl in ("memory", "pids", "cpu"):
                parent = ROOT / ctl / _PARENT
                parent.mkdir(exist_ok=True)
                d = parent / name
                d.mkdir()
                self.dirs.append(d)
                self.by_controller[ctl] = d
            mem, pids, cpu = self.dirs
            _write(mem / "memory.limit_in_bytes", str(memory_mb * 2**20))
            _write(mem / "memory.memsw.limit_in_bytes", str(memory_mb * 2**20))
            _write(pids / "pids.max", str(nproc))
            _write(cpu / "cpu.cfs_period_us", str(self.PERIOD_US))
            _write(cpu / "cpu.cfs_quota_us", str(quota))

    @property
    def env(self) -> dict[str, str]:
        return {ENV: ":".join(str(d / "cgroup.procs") for d in self.dirs)} if self.dirs else {}

    def pids(self) -> set[int]:
        out: set[int] = set()
        for d in self.dirs:
            try:
                out |= {int(x) for x in (d / "cgroup.procs").read_text().split()}
            except (OSError, ValueError):
                pass
        return out

    def out_of_memory(self) -> bool:
        """True if a process of the sandbox was OOM-killed at the group's memory bound.
        (Not ``memory.failcnt``: in v1 it also counts page cache reclaimed at the limit.)"""
        d = self.by_controller.get("memory")
        if d is None:
            return False
        if self.mode == "v2":
            return _counter(d / "memory.events", "oom_kill") > 0
        return _counter(d / "memory.oom_control", "oom_kill") > 0

    def out_of_pids(self) -> bool:
        """True if a ``fork`` or thread start was refused at the group's ``pids.max``."""
        d = self.by_controller.get("pids")
        return d is not None and _counter(d / "pids.events", "max") > 0

    def exceeded(self) -> list[str]:
        """The bounds this sandbox hit: ``memory-limit``, ``pids-limit``."""
        return [name for name, hit in (("memory-limit", self.out_of_memory()),
                                       ("pids-limit", self.out_of_pids())) if hit]  # fmt: skip

    def close(self) -> None:
        """Kill every process left in the group, then remove it."""
        import time

        for _ in range(50):
            left = self.pids()
            if not left:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.02)
        for d in self.dirs:
            try:
                d.rmdir()
            except OSError:
                pass


def _alive(pid: int) -> bool:
    """True if process ``pid`` exists and is not a zombie (a killed grader not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != b"Z"


def _group_pids(d: Path) -> str:
    try:
        return (d / "cgroup.procs").read_text().strip()
    except FileNotFoundError:
        return ""
    except OSError:
        return "?"  # unreadable: not known to be empty


def sweep(mode: str, root: Path | None = None, legacy_age_s: float = LEGACY_AGE_S) -> list[Path]:
    """Remove the stale groups under ``root`` (default :data:`ROOT`) of hierarchy ``mode``:
    those with no process left whose grader (the pid in the name ``k<pid>-<hex>``) is gone —
    a grader killed with ``SIGKILL`` leaves its groups behind. A group of a live grader is
    never touched (it may not have been joined yet); one without an owner in its name only
    when older than ``legacy_age_s``. Returns the folders removed."""
    root = ROOT if root is None else root
    ctls = ("",) if mode == "v2" else ("memory", "pids", "cpu") if mode == "v1" else ()
    removed: list[Path] = []
    for ctl in ctls:
        parent = root / ctl / _PARENT if ctl else root / _PARENT
        try:
            entries = [e for e in os.scandir(parent) if e.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        for e in entries:
            owned = _OWNED.fullmatch(e.name)
            if owned:
                if _alive(int(owned.group(1))):
                    continue
            elif not re.fullmatch(r"k[0-9a-f]+", e.name):
                continue  # not a group of the grader's
            else:
                try:
                    if time.time() - e.stat(follow_symlinks=False).st_mtime < legacy_age_s:
                        continue
                except OSError:
                    continue
            d = Path(e.path)
            if _group_pids(d):
                continue  # processes left: not stale (nor ours to kill)
            try:
                d.rmdir()
            except OSError:
                continue
            removed.append(d)
    return removed


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError:
        if path.name not in ("memory.memsw.limit_in_bytes", "memory.swap.max"):  # no swap acct
            raise


def join(env_value: str) -> None:
    """In the launcher: move this process into the submission's cgroup(s) (:data:`ENV`)."""
    for procs in filter(None, env_value.split(":")):
        with open(procs, "w") as fh:
            fh.write(str(os.getpid()))


def _sandbox_tree(pid: int) -> list:
    """The process ``pid`` and its descendants, as :func:`tpp.grading.reaper._descendants`
    lists a kernel's; [] if ``pid`` is gone. (Imported here, in the grader process: the
    launcher imports this module with the standard library only.)"""
    import psutil

    from tpp.grading.reaper import _descendants

    try:
        return _descendants(psutil.Process(pid))
    except psutil.Error:
        return []


def _wait_ended(procs: list, wait_s: float, period_s: float = 0.02) -> bool:
    """Wait until each of ``procs`` has exited (a zombie has: it cannot write), at most
    ``wait_s`` seconds; True if they all did."""
    import psutil

    end = time.monotonic() + wait_s
    while True:
        alive = []
        for p in procs:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.Error:
                pass
        if not alive:
            return True
        if time.monotonic() > end:
            return False
        procs = alive
        time.sleep(period_s)


class DiskWatch:
    """Where the kernel's shared folder cannot be a ``tmpfs`` (the grader is not root), a
    thread that bounds it instead: every :attr:`PERIOD_S` it adds up the blocks the folder's
    files hold (sparse files count what they use) and their number; past ``disk_mb`` MiB or
    :attr:`MAX_ENTRIES` entries it kills the sandbox (``kill``: the PID namespace dies with its
    init) and deletes the files. Between two looks a kernel can write at most what its disk
    writes in :attr:`PERIOD_S`, and no file exceeds ``RLIMIT_FSIZE`` (``--file-mb``)."""

    PERIOD_S = 0.05
    MAX_ENTRIES = 10_000

    def __init__(self, folder: Path, disk_mb: int, keep: tuple[str, ...] = ()) -> None:
        import threading

        self.folder, self.limit = folder, int(disk_mb) * 2**20
        self.keep = set(keep)  # names the grader wrote (connection file): never deleted
        self.pid: int | None = None
        self.hit = False
        self._victims: list = []  # the sandbox's processes when it was killed (psutil)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tpp-disk-watch", daemon=True)
        self._thread.start()

    def usage(self) -> tuple[int, int]:
        """(bytes held, entries) under the folder, without following links."""
        total = entries = 0
        stack = [str(self.folder)]
        while stack and entries <= self.MAX_ENTRIES:
            try:
                it = os.scandir(stack.pop())
            except OSError:
                continue
            with it:
                for e in it:
                    entries += 1
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += st.st_blocks * 512
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
        return total, entries

    def _run(self) -> None:
        while not self._stop.wait(self.PERIOD_S):
            size, entries = self.usage()
            if size > self.limit or entries > self.MAX_ENTRIES:
                self.hit = True
                if self.pid is not None:
                    self._victims += _sandbox_tree(self.pid)
                    try:
                        os.kill(self.pid, signal.SIGKILL)
                    except OSError:
                        pass
                self._purge()

    def settle(self, wait_s: float = 30.0) -> None:
        """After a hit and the sandbox's kill: delete what the dying kernel wrote after the
        watchdog's own purge, so the next attempt on this folder does not start over the limit.

        First wait until every process the sandbox held when it was killed has ended (at most
        ``wait_s``; it returns as soon as they have): the kill reaches them through ``bwrap
        --die-with-parent`` and the PID namespace's teardown, which on a busy machine takes
        longer than any fixed pause, and a process still alive can still write. Then purge
        until two looks :attr:`PERIOD_S` apart find the folder unchanged."""
        _wait_ended(self._victims, wait_s)
        end, before = time.monotonic() + wait_s, None
        while True:
            self._purge()
            now = self.usage()
            if now == before or time.monotonic() > end:
                return
            before = now
            time.sleep(self.PERIOD_S)

    def _purge(self) -> None:
        for root, _dirs, files in os.walk(self.folder, topdown=False):
            for name in files:
                if name not in self.keep:
                    try:
                        os.unlink(os.path.join(root, name))
                    except OSError:
                        pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
