"""Kernel launcher: limits, the OS sandbox, the guard, then the kernel.

Used as the ``argv`` of the grader's private kernelspec::

    python launcher.py --memory-mb 2048 --cpu-seconds 120 --file-mb 64 --nproc 64 \
        [--sandbox JSON] [--guard JSON] -- python -m ipykernel_launcher -f {connection_file}

Outside the sandbox (``--sandbox``): set the limits, then ``exec`` ``bwrap`` (see
:mod:`tpp.grading.sandbox`) on this same launcher with ``--inside UID``. Inside: mount the
private ``noexec`` folder, drop to the kernel's uid and capabilities, then install the guard
of :mod:`tpp.grading.guard` (a second layer) and run the ``-m`` module in-process (``runpy``),
so every cell runs under its audit hook. Without ``--sandbox`` the sandbox step is skipped.

The limits (``resource.setrlimit``, hard = soft, so the kernel cannot raise them again) are
inherited by everything the kernel starts:

- ``RLIMIT_AS``: address space, so a huge allocation raises ``MemoryError`` in the kernel;
- ``RLIMIT_CPU``: CPU seconds, after which the kernel is killed;
- ``RLIMIT_FSIZE``: the largest file the kernel may write;
- ``RLIMIT_NPROC``: processes and threads of the kernel's uid;
- ``RLIMIT_CORE``: no core dumps.

This file is run as a script and imports only the standard library (it must start fast).
"""

from __future__ import annotations

import json
import os
import resource
import sys


def _limit(which: int, value: int) -> None:
    soft, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, value))


def _set_limits(values: dict[str, str]) -> None:
    mib = 1024 * 1024
    if int(values.get("--memory-mb", 0)) > 0:
        _limit(resource.RLIMIT_AS, int(values["--memory-mb"]) * mib)
    if int(values.get("--cpu-seconds", 0)) > 0:
        _limit(resource.RLIMIT_CPU, int(values["--cpu-seconds"]))
    if int(values.get("--file-mb", 0)) > 0:
        _limit(resource.RLIMIT_FSIZE, int(values["--file-mb"]) * mib)
    _limit(resource.RLIMIT_CORE, 0)


def _outside(opts: list[str], values: dict[str, str], cmd: list[str]) -> None:
    """Set the limits and exec bwrap on this launcher (``--inside``)."""
    import sandbox  # this folder's sandbox.py; only the standard library

    config = json.loads(values["--sandbox"])
    conn = cmd[cmd.index("-f") + 1]
    shared = os.path.dirname(os.path.abspath(conn))
    uid = sandbox.new_uid() if os.getuid() == 0 else os.getuid()
    if os.getuid() == 0:  # the kernel's own uid must create its sockets and answers here
        os.chown(shared, uid, uid)
        for entry in os.scandir(shared):
            if entry.is_dir(follow_symlinks=False) and entry.name != sandbox.WORK:
                os.chown(entry.path, uid, uid)
    rest = []
    skip = False
    for o in opts:  # drop --sandbox JSON
        if skip:
            skip = False
            continue
        if o == "--sandbox":
            skip = True
            continue
        rest.append(o)
    inner = [sys.executable, os.path.abspath(__file__), *rest, "--inside", str(uid)]
    _set_limits(values)
    argv = sandbox.bwrap_argv(shared, config, [*inner, "--", *cmd])
    os.execv(argv[0], argv)


def main(argv: list[str]) -> None:
    if "--" not in argv:
        raise SystemExit("usage: launcher.py [--memory-mb M] [--cpu-seconds S] -- CMD...")
    split = argv.index("--")
    opts, cmd = argv[:split], argv[split + 1 :]
    values = dict(zip(opts[::2], opts[1::2], strict=False))
    if "--sandbox" in values:
        _outside(opts, values, cmd)
        return
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if "--inside" in values:
        import sandbox

        conn = cmd[cmd.index("-f") + 1]
        cmd[cmd.index("-f") + 1] = sandbox.enter(
            os.path.dirname(conn), int(values["--inside"]), conn
        )
    _set_limits(values)
    if int(values.get("--nproc", 0)) > 0:
        _limit(resource.RLIMIT_NPROC, int(values["--nproc"]))
    if "--guard" not in values or len(cmd) < 3 or cmd[1] != "-m":
        os.execv(cmd[0], cmd)
    import runpy

    config = json.loads(values["--guard"])
    if "-f" in cmd:  # the kernel's own connection file stays readable
        config.setdefault("allow_read", []).append(cmd[cmd.index("-f") + 1])
    import guard  # this folder's guard.py; only the standard library

    sys.path[:] = [p for p in sys.path if p != os.path.dirname(os.path.abspath(__file__))]
    sys.path.insert(0, os.getcwd())  # as for ``python -m``: not this file's folder
    guard.install(config)
    # IPython's history would be an SQLite file outside the kernel's folder: keep it in memory.
    sys.argv = [cmd[2], *cmd[3:], "--HistoryManager.hist_file=:memory:"]
    runpy.run_module(cmd[2], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
