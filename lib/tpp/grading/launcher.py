"""Kernel launcher: set resource limits on this process, then exec the real kernel.

Used as the ``argv`` of the grader's private kernelspec::

    python launcher.py --memory-mb 2048 --cpu-seconds 120 --file-mb 64 -- \
        python -m ipykernel_launcher -f {connection_file}

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
    os.execv(cmd[0], cmd)


if __name__ == "__main__":
    main(sys.argv[1:])
