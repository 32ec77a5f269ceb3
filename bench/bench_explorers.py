"""The memory explorer's table, side by side in one run (issue 22): the memory-only entry point
:func:`tpp.planner.memory_table.evaluate_memory` against the full :func:`tpp.planner.evaluate`
(which also times every kernel, simulates the pipeline and the data-parallel timeline), on the
same layouts of the explorer's grid, the planner's caches emptied before each. Then the
explorers' data as a cold book build computes them (``_ext/tpp_explorers.py``), per explorer.

Run: .venv/bin/python bench/bench_explorers.py [--every 4]
On a shared machine read the ratio (and the CPU seconds), not the wall times.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

from tpp import models, planner
from tpp.planner import estimate
from tpp.planner.memory_table import evaluate_memory
from tpp.site import explorers

ROOT = Path(__file__).resolve().parents[1]


def _clear() -> None:
    for f in (estimate._held, estimate._pipeline, estimate._layer_time, estimate._head_time):
        f.cache_clear()


def _grid(every: int) -> list[tuple]:
    opts = explorers.EXPLORERS["memory"].options
    combos = list(itertools.product(*opts.values()))[::every]
    out = []
    for c in combos:
        v = dict(zip(opts, c, strict=True))
        m = models.model(v.pop("model"))
        s = v.pop("seq_len")
        lay = planner.Layout(**v)
        out.append((m, lay, dict(seq_len=s, global_batch=lay.dp * lay.microbatch_size * 8)))
    return out


def _time(fn, cases) -> tuple[float, float, list]:
    _clear()
    t0, c0 = time.perf_counter(), time.process_time()
    res = [fn(m, lay, **kw) for m, lay, kw in cases]
    return time.perf_counter() - t0, time.process_time() - c0, res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--every", type=int, default=4, help="every n-th layout of the grid")
    args = ap.parse_args()
    cases = _grid(args.every)
    new_w, new_c, new = _time(evaluate_memory, cases)
    old_w, old_c, old = _time(planner.evaluate, cases)
    same = all((a.memory_bytes, a.memory, a.heaviest_rank) == (b.memory_bytes, b.memory,
                                                               b.heaviest_rank)
               for a, b in zip(new, old, strict=True))
    print(f"memory table, {len(cases)} layouts: evaluate {old_w:6.2f} s wall ({old_c:6.2f} s "
          f"CPU) | evaluate_memory {new_w:6.2f} s wall ({new_c:6.2f} s CPU) | "
          f"x{old_c / max(new_c, 1e-9):.0f} CPU | same memory: {same}")
    sys.path.insert(0, str(ROOT / "_ext"))
    import tpp_explorers

    _clear()
    total = 0.0
    for name in explorers.EXPLORERS:
        t0 = time.perf_counter()
        explorers.tables(name)
        dt = time.perf_counter() - t0
        total += dt
        print(f"  explorer {name:13s} data {dt:6.2f} s")
    print(f"explorers' data (as {tpp_explorers.__name__}.write_data computes them): "
          f"{total:.1f} s")
    if not same:
        raise SystemExit("the memory-only entry point disagrees with evaluate")


if __name__ == "__main__":
    main()
