"""The grading kernel's kernelspec (launcher, limits, sandbox, guard) and its client.

:func:`kernelspec_dir` writes a private kernelspec whose ``argv`` starts the kernel through
:mod:`tpp.grading.launcher`; :class:`GraderClient` is nbclient with a per-cell output budget.
"""

from __future__ import annotations

import atexit
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import nbformat
from nbclient import NotebookClient

from tpp.grading import sandbox

if TYPE_CHECKING:
    from tpp.grading.run import Limits

KERNEL_NAME = "tpp-grader"
_SPEC_DIRS: dict[tuple, Path] = {}


def guard_config(limits: Limits) -> dict[str, Any]:
    """What the kernel's guard protects (see :mod:`tpp.grading.guard`).

    Read-protected: ``limits.protect`` (the grader passes the solutions and results folders),
    every ``solutions/`` and ``.git`` at or above the ``tpp`` package (the course repository),
    the Jupyter runtime folder (other kernels' connection files) and the grader's temporary
    folders (``tpp-grade-*``, ``tpp-ipc-*``, ``tpp-kernels-*``) other than the kernel's own.
    Writable: only the kernel's own temporary folder, and ``/dev/null``.
    """
    from jupyter_core.paths import jupyter_runtime_dir

    import tpp

    read = {str(Path(p).resolve()) for p in limits.protect}
    for d in Path(tpp.__file__).resolve().parents:
        for name in ("solutions", ".git"):
            if (d / name).exists():
                read.add(str(d / name))
    read.add(str(Path(jupyter_runtime_dir()).resolve()))
    tmp = str(Path(tempfile.gettempdir()).resolve())
    return {
        "read": sorted(read),
        "read_prefixes": [[tmp, "tpp-grade-"], [tmp, "tpp-ipc-"], [tmp, "tpp-kernels-"]],
        "write": ["/dev/null"],
    }


def kernelspec_dir(limits: Limits) -> Path:
    """A private kernelspec folder whose kernel starts through the limiting launcher."""
    guard = json.dumps(guard_config(limits), sort_keys=True) if limits.guard else ""
    key = (limits.memory_mb, limits.cpu_seconds, limits.file_mb, guard, limits.sandbox,
           limits.nproc)  # fmt: skip
    if key in _SPEC_DIRS and _SPEC_DIRS[key].exists():
        return _SPEC_DIRS[key]
    root = Path(tempfile.mkdtemp(prefix="tpp-kernels-"))
    atexit.register(shutil.rmtree, root, True)
    spec = root / KERNEL_NAME
    spec.mkdir()
    launcher = Path(__file__).with_name("launcher.py")
    env = {
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
        "PYTHONHASHSEED": "0",
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
        "PYTHONWARNINGS": "ignore",
        "LANG": "C.UTF-8",
    }
    box: list[str] = []
    if limits.sandbox:
        import tpp

        package_dir = str(Path(tpp.__file__).resolve().parent.parent)
        box = ["--sandbox", sandbox.encode(sandbox.config_for(package_dir, env))]
    argv = [
        sys.executable,
        str(launcher),
        "--memory-mb", str(limits.memory_mb),
        "--cpu-seconds", str(limits.cpu_seconds),
        "--file-mb", str(limits.file_mb),
        "--nproc", str(limits.nproc if limits.sandbox else 0),
        *box,
        *(["--guard", guard] if guard else []),
        "--",
        sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}",
    ]  # fmt: skip
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": argv,
                "display_name": "Python 3 (tpp grader)",
                "language": "python",
                "env": env,
                "interrupt_mode": "message",  # no signals across the sandbox's PID namespace
                "metadata": {"debugger": False},
            }
        )
    )
    _SPEC_DIRS[key] = root
    return root


def _message_size(msg: dict[str, Any]) -> int:
    content = msg.get("content", {})
    if "text" in content:
        return len(content["text"])
    if "data" in content:
        return sum(len(str(v)) for v in content["data"].values())
    if "traceback" in content:
        return sum(len(x) for x in content["traceback"])
    return 200


class GraderClient(NotebookClient):
    """nbclient with a per-cell output budget: outputs beyond it are dropped, not stored."""

    def __init__(self, nb: nbformat.NotebookNode, output_bytes: int, **kw: Any) -> None:
        super().__init__(nb, **kw)
        self._output_bytes = output_bytes
        self._used: dict[int, int] = {}
        self._truncated: set[int] = set()

    def output(self, outs, msg, display_id, cell_index):  # type: ignore[override]
        used = self._used.get(cell_index, 0) + _message_size(msg)
        self._used[cell_index] = used
        if used > self._output_bytes:
            if cell_index not in self._truncated:
                self._truncated.add(cell_index)
                outs.append(
                    nbformat.v4.new_output(
                        "stream", name="stderr", text="[output truncated by the grader]\n"
                    )
                )
            return None
        return super().output(outs, msg, display_id, cell_index)
