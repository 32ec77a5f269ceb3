"""Kill what a kernel left behind: its process tree, its process group, adopted orphans.

With the sandbox, killing ``bwrap`` ends the kernel's PID namespace and every process in it;
these helpers are the layer for runs without it (and a backstop with it).
"""

from __future__ import annotations

import os
import signal

import psutil


def _become_subreaper() -> bool:
    """Adopt orphaned descendants (Linux ``prctl(PR_SET_CHILD_SUBREAPER, 1)``); True if set."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0  # 36 = PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return False


def _children() -> dict[tuple[int, float], psutil.Process]:
    """This process's children, keyed by (pid, creation time)."""
    out = {}
    try:
        for c in psutil.Process().children():
            try:
                out[(c.pid, c.create_time())] = c
            except psutil.Error:
                pass
    except psutil.Error:
        pass
    return out


def _kill_adopted(before: set[tuple[int, float]]) -> None:
    """Kill (and reap) the children this process adopted since ``before``: orphaned daemons.

    A few passes, since a daemon may fork again while it is being killed.
    """
    for _ in range(5):
        new = [p for key, p in _children().items() if key not in before]
        if not new:
            return
        procs: list[psutil.Process] = []
        for p in new:
            try:
                procs += [p, *p.children(recursive=True)]
            except psutil.Error:
                procs.append(p)
        _kill_tree(procs)


def _kill_tree(procs: list[psutil.Process]) -> None:
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=3)


def _descendants(kernel: psutil.Process | None) -> list[psutil.Process]:
    """The kernel and its descendants, if the kernel is still the process we started.

    ``psutil.Process`` remembers the creation time, so a recycled pid is never mistaken for
    the kernel, and ``kill()`` on these objects refuses recycled pids too.
    """
    if kernel is None or not kernel.is_running():
        return []
    try:
        return [kernel, *kernel.children(recursive=True)]
    except psutil.Error:
        return []


def _kill_group(pgid: int | None, kernel: psutil.Process | None) -> None:
    """SIGKILL the kernel's process group (orphans included), unless the pgid was recycled.

    Linux does not reuse a pid while a process group of that id has members; so if a process
    with pid ``pgid`` exists and it is not our kernel, the group is not ours: leave it.
    """
    if not pgid or pgid == os.getpgid(0):
        return
    try:
        psutil.Process(pgid)
        if kernel is None or not kernel.is_running():
            return
    except psutil.NoSuchProcess:
        pass
    except psutil.Error:
        return
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
