"""The book build's costs, side by side in one run (issue 22), as ratios.

1. Chapters executed one after another, then in ``--jobs`` processes (``_ext/tpp_execute.py``,
   the book build's pre-execution), into throw-away caches: wall and CPU seconds, speed-up.
2. Chapters 09 and 10 at a base commit (default ``db57291``, before issue 22's cost changes)
   against the working tree: CPU seconds of their kernels, ratio.
3. The explorers' data (``_ext/tpp_explorers.py``): computed (the cold build) against copied
   from the build's store (every later build of the same library).

4. ``--with-library 17,18``: those chapters and the library at ``--base`` against the working
   tree (for a change of the library's speed), CPU seconds and ratios.

Run: .venv/bin/python bench/bench_build.py [--jobs 2] [--chapters 07,08,09,10,11] [--base REV]
     [--skip explorers] [--record] [--with-library 17,18]
``--record`` writes the serial run's seconds of each chapter into ``_ext/execution_seconds.json``
(the order of a fresh build; ``--chapters all`` for every chapter). The kernels run as in the
build: one BLAS thread, rfc3987_syntax deferred (``_ext/tpp_execute.py``).
On a shared machine read the ratios (and the CPU seconds), not the wall times.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))
os.environ.setdefault("TPP_STATIC", "1")
os.environ.setdefault("IPYTHONDIR", str(ROOT / ".ipython"))

import tpp_execute  # noqa: E402

tpp_execute.single_threaded_blas()  # the kernels run as in the build


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _run(paths: list[Path], jobs: int, seconds: dict | None = None) -> tuple[float, float]:
    """Execute ``paths`` in ``jobs`` spawned worker processes; (wall s, CPU s of the workers and
    their kernels). Each execution must succeed; ``seconds`` gets each notebook's seconds."""
    cpu0, t0 = _children_cpu(), time.perf_counter()
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn"),
                             initializer=tpp_execute.worker_init) as pool:
        for path, text, s, tb in pool.map(tpp_execute.execute_one, map(str, paths),
                                          [600] * len(paths), [False] * len(paths)):
            if text is None:
                raise SystemExit(f"{path} failed:\n{tb}")
            if seconds is not None:
                seconds[Path(path).relative_to(ROOT).as_posix()] = round(s, 1)
    return time.perf_counter() - t0, _children_cpu() - cpu0


def chapters(names: list[str], jobs: int, record: bool = False) -> None:
    if names == ["all"]:
        paths = sorted((ROOT / "chapters").glob("*.ipynb"))
    else:
        paths = [next((ROOT / "chapters").glob(f"{n}_*.ipynb")) for n in names]
    seconds: dict[str, float] = {}
    serial = _run(paths, 1, seconds)
    if record:
        table = json.loads(tpp_execute.ESTIMATES.read_text(encoding="utf8")) \
            if tpp_execute.ESTIMATES.is_file() else {}
        tpp_execute.ESTIMATES.write_text(json.dumps(table | seconds, indent=1, sort_keys=True)
                                         + "\n", encoding="utf8")
        print(f"recorded {len(seconds)} chapters' seconds in {tpp_execute.ESTIMATES}")
    parallel = _run(paths, jobs)
    print(f"chapters {','.join(names)}: serial {serial[0]:6.1f} s wall, {serial[1]:6.1f} s CPU | "
          f"{jobs} processes {parallel[0]:6.1f} s wall, {parallel[1]:6.1f} s CPU | "
          f"speed-up x{serial[0] / parallel[0]:.2f} (wall)  load {os.getloadavg()[0]:.1f}")


def old_and_new_with_library(names: list[str], base: str) -> None:
    """Chapters ``names`` at ``base`` with the library at ``base`` (a copy of that commit's
    tree, put first on the kernels' PYTHONPATH) against the working tree: CPU seconds of the
    kernels, one chapter at a time, old then new, side by side."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = subprocess.run(["git", "archive", base], cwd=ROOT, check=True,
                              capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=tree, check=True)
        for name in names:
            new = next((ROOT / "chapters").glob(f"{name}_*.ipynb"))
            old = Path(tmp) / "chapters" / new.name
            saved = os.environ.get("PYTHONPATH")
            os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(tmp) / "lib"),
                                                                     saved]))
            try:
                w_old, c_old = _run([old], 1)
            finally:
                if saved is None:
                    os.environ.pop("PYTHONPATH")
                else:
                    os.environ["PYTHONPATH"] = saved
            w_new, c_new = _run([new], 1)
            print(f"chapter {name} (and library): {base} {c_old:5.1f} s CPU ({w_old:5.1f} s "
                  f"wall) | now {c_new:5.1f} s CPU ({w_new:5.1f} s wall) | "
                  f"x{c_old / c_new:.2f} less CPU, x{w_old / w_new:.2f} less wall  "
                  f"load {os.getloadavg()[0]:.1f}")


def old_and_new(names: list[str], base: str) -> None:
    for name in names:
        new = next((ROOT / "chapters").glob(f"{name}_*.ipynb"))
        rel = new.relative_to(ROOT)
        # the old copy runs from the chapters' folder too (same working directory)
        moved = new.parent / f".bench-old-{new.name}"
        moved.write_bytes(subprocess.run(["git", "show", f"{base}:{rel}"], cwd=ROOT,
                                         check=True, capture_output=True).stdout)
        try:
            w_old, c_old = _run([moved], 1)
        finally:
            moved.unlink()
        w_new, c_new = _run([new], 1)
        print(f"chapter {name}: {base} {c_old:5.1f} s CPU ({w_old:5.1f} s wall) | now "
              f"{c_new:5.1f} s CPU ({w_new:5.1f} s wall) | x{c_old / c_new:.2f} less CPU")


def explorers() -> None:
    import tpp_explorers

    with tempfile.TemporaryDirectory() as tmp:
        cpu0, t0 = time.process_time(), time.perf_counter()
        tpp_explorers.write_data(Path(tmp) / "store")
        cold = time.perf_counter() - t0, time.process_time() - cpu0
        t0 = time.perf_counter()
        shutil.copytree(Path(tmp) / "store" / tpp_explorers.DATA_DIR,
                        Path(tmp) / "html" / tpp_explorers.DATA_DIR)
        copy = time.perf_counter() - t0
    print(f"explorers' data: computed {cold[0]:6.1f} s wall ({cold[1]:6.1f} s CPU) | copied "
          f"from the store {copy:.3f} s | x{cold[0] / copy:.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=tpp_execute.jobs())
    ap.add_argument("--chapters", default="07,08,09,10,11")
    ap.add_argument("--base", default="db57291")
    ap.add_argument("--skip", default="", help="comma-separated: chapters,old-new,explorers")
    ap.add_argument("--with-library", default="",
                    help="chapters (e.g. 17,18) run at --base with the library at --base too, "
                         "against the working tree")
    ap.add_argument("--record", action="store_true",
                    help="write the serial seconds into _ext/execution_seconds.json")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    if "chapters" not in skip:
        chapters(args.chapters.split(","), max(args.jobs, 2), args.record)
    if "old-new" not in skip:
        old_and_new(["09", "10"], args.base)
    if args.with_library:
        old_and_new_with_library(args.with_library.split(","), args.base)
    if "explorers" not in skip:
        explorers()


if __name__ == "__main__":
    main()
