"""Kernel launcher: set resource limits on this process, install the guard, start the kernel.

Used as the ``argv`` of the grader's private kernelspec::

    python launcher.py --memory-mb 2048 --cpu-seconds 120 --file-mb 64 [--guard JSON] -- \
        python -m ipykernel_launcher -f {connection_file}

Without ``--guard`` the command is ``exec``-ed. With it, :func:`tpp.grading.guard.install`
puts an audit hook (and a seccomp filter) in *this* process, and the ``-m`` module runs here,
in-process (``runpy``), so that every cell of the kernel runs under the hook.

The limits (``resource.setrlimit``) are inherited by everything the kernel starts:

- ``RLIMIT_AS``: address space, so a huge allocation raises ``MemoryError`` in the kernel;
- ``RLIMIT_CPU``: CPU seconds, after which the kernel is killed (SIGXCPU, then SIGKILL);
- ``RLIMIT_FSIZE``: the largest file the kernel may write;
- ``RLIMIT_CORE``: no core dumps.

This file is run as a script and imports only the standard library (it must start fast).
"""

from __future__ import annotations

import os
import resource
import sys


def _limit(which: int, value: int) -> None:
    soft, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, hard if which != resource.RLIMIT_CPU else value + 5))


def main(argv: list[str]) -> None:
    if "--" not in argv:
        raise SystemExit("usage: launcher.py [--memory-mb M] [--cpu-seconds S] -- CMD...")
    split = argv.index("--")
    opts, cmd = argv[:split], argv[split + 1 :]
    values = dict(zip(opts[::2], opts[1::2], strict=False))
    mib = 1024 * 1024
    if int(values.get("--memory-mb", 0)) > 0:
        _limit(resource.RLIMIT_AS, int(values["--memory-mb"]) * mib)
    if int(values.get("--cpu-seconds", 0)) > 0:
        _limit(resource.RLIMIT_CPU, int(values["--cpu-seconds"]))
    if int(values.get("--file-mb", 0)) > 0:
        _limit(resource.RLIMIT_FSIZE, int(values["--file-mb"]) * mib)
    _limit(resource.RLIMIT_CORE, 0)
    if "--guard" not in values or len(cmd) < 3 or cmd[1] != "-m":
        os.execv(cmd[0], cmd)
    import json
    import runpy

    config = json.loads(values["--guard"])
    if "-f" in cmd:  # the kernel's own connection file stays readable
        config.setdefault("allow_read", []).append(cmd[cmd.index("-f") + 1])
    import guard  # this folder's guard.py; only the standard library

    sys.path[0] = os.getcwd()  # as for ``python -m``: not this file's folder
    guard.install(config)
    # IPython's history would be an SQLite file outside the kernel's folder: keep it in memory.
    sys.argv = [cmd[2], *cmd[3:], "--HistoryManager.hist_file=:memory:"]
    runpy.run_module(cmd[2], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
