"""Time building + simulating pipeline schedules, side by side with the code before issue 22
(``tests/pipeline_reference.py``) and with PyTorch 2.13's own schedule builders, in one run.

Run: .venv/bin/python bench/bench_pipeline.py [--repeats N] [--no-torch]
Goals (issue 22): interleaved P=64, M=512, v=4 built + simulated in < 0.4 s (best of N; on a
busy machine read the ratio to the old code); every builder of a PyTorch order >= 50x faster
than PyTorch 2.13's builder of the same schedule (same machine, same run); recompute and overlap
options cost nothing when unused (the ``recompute=False`` and ``overlap=None`` runs).
"""

from __future__ import annotations

import argparse
import sys
import time
from itertools import repeat
from pathlib import Path

from tpp import pipeline as pp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import pipeline_reference as ref  # noqa: E402

CASES = [
    ("interleaved", 64, 512, 4),
    ("dualpipev", 64, 512, 2),
    ("dualpipe", 64, 512, 1),
    ("zbv", 64, 512, 2),
    ("zb1p", 64, 512, 2),
    ("1f1b", 64, 512, 1),
    ("zb-h1", 64, 512, 1),
    ("gpipe", 16, 64, 1),
    ("interleaved", 8, 32, 4),
]
# PyTorch's builders are slow (minutes at P=64, M=512 on a busy machine): compare at a size
# where one PyTorch build takes seconds; the ratio is printed for that same size.
TORCH_CASES = [("zb1p", 16, 128, 2), ("interleaved", 16, 128, 2), ("looped-bfs", 16, 128, 2),
               ("zbv", 16, 128, 2), ("dualpipev", 16, 128, 2), ("1f1b", 16, 128, 1),
               ("gpipe", 16, 128, 1)]


CPU: list[float] = []  # process time of the last best() call: on a machine shared with other
# work the wall-clock time includes waiting for a core, the process time does not


def best(f, repeats: int) -> float:
    """Best wall-clock time of ``repeats`` calls (the best process time goes to ``CPU``)."""
    t = c = float("inf")
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        f()
        t = min(t, time.perf_counter() - t0)
        c = min(c, time.process_time() - c0)
    CPU[:] = [c]
    return t


def old_build(name: str, P: int, M: int, v: int) -> pp.Schedule:
    if name == "interleaved":
        return ref.interleaved_reference(P, M, v)
    if name == "zb1p":
        return ref.zb1p_reference(P, M, v)
    return pp.schedule(name, P, M, v)  # builders this issue did not change


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args()
    n = args.repeats
    print(f"best of {n}; old = the code before issue 22 (tests/pipeline_reference.py)")
    print(f"{'schedule':>12} {'P':>3} {'M':>4} {'v':>2} {'actions':>7} {'build':>7} "
          f"{'sim':>7} {'total s':>7} {'old s':>7} {'old/new':>7} {'us/act':>6}")
    goal = None
    for name, P, M, v in CASES:
        s = pp.schedule(name, P, M, v)
        tw = 0 if name == "interleaved" else 1
        kw = dict(t_f=1, t_b=2, t_w=tw)
        build = best(lambda: pp.schedule(name, P, M, v), n)  # noqa: B023
        cpu = CPU[0]
        sim = best(lambda: pp.simulate(s, **kw), n)  # noqa: B023
        cpu += CPU[0]
        old = best(lambda: old_build(name, P, M, v), n)  # noqa: B023
        old_cpu = CPU[0]
        old += best(lambda: ref.simulate_reference(s, 1, 2, tw), n)  # noqa: B023
        old_cpu += CPU[0]
        total = build + sim
        if (name, P, M, v) == ("interleaved", 64, 512, 4):
            goal = (total, cpu, old, old_cpu)
        print(f"{name:>12} {P:>3} {M:>4} {v:>2} {s.num_actions:>7} {build:>7.3f} {sim:>7.3f} "
              f"{total:>7.3f} {old:>7.3f} {old / total:>7.2f} {1e6 * total / s.num_actions:>6.2f}")
    total, cpu, old, old_cpu = goal
    print(f"goal: interleaved P=64 M=512 v=4 built + simulated in {total:.3f} s wall, "
          f"{cpu:.3f} s process time (old code: {old:.3f} s wall, {old_cpu:.3f} s process; "
          f"{old_cpu / cpu:.2f}x) -> {'met' if cpu < 0.4 else 'NOT met'} (< 0.4 s of CPU; the "
          f"wall time equals it on an idle machine)")

    # recompute only changes the cost table before the pass and overlap only the F&B branch, so
    # neither costs anything per action when unused: compare with the old code (no options then
    # on this path) and with recompute on, process times, interleaved runs
    s = pp.schedule("zb1p", 64, 512, 2)
    times = {"new, recompute=False overlap=None": [], "new, recompute=True": [],
             "old code": []}
    for _ in range(n):
        best(lambda: pp.simulate(s, t_f=1, t_b=2, t_w=1, overlap=None, recompute=False), 1)
        times["new, recompute=False overlap=None"].append(CPU[0])
        best(lambda: pp.simulate(s, t_f=1, t_b=2, t_w=1, recompute=True), 1)
        times["new, recompute=True"].append(CPU[0])
        best(lambda: ref.simulate_reference(s, 1, 2, 1), 1)
        times["old code"].append(CPU[0])
    print("options unused, zb1p P=64 M=512 v=2 simulated (best process time): " + ", ".join(
        f"{k} {min(v):.3f} s" for k, v in times.items()))

    if args.no_torch:
        return
    try:
        import torch.distributed.pipelining  # noqa: F401  (imported before any timing)
        from tpp.pipeline.pytorch import pytorch_schedule
    except ImportError:
        print("torch not installed: PyTorch builder ratios skipped")
        return
    print("PyTorch 2.13 builders vs ours, same sizes, best of "
          f"{max(1, n // 2)} (PyTorch) and {n} (ours):")
    for name, P, M, v in TORCH_CASES:
        theirs = best(lambda: pytorch_schedule(name, P, M, v), max(1, n // 2))  # noqa: B023
        theirs_cpu = CPU[0]
        ours = best(lambda: pp.schedule(name, P, M, v), n)  # noqa: B023
        ratio, ratio_cpu = theirs / ours, theirs_cpu / max(CPU[0], 1e-9)
        print(f"{name:>12} P={P} M={M} v={v}: PyTorch {theirs:.3f} s, ours {ours:.4f} s wall: "
              f"{ratio:.0f}x; process time {ratio_cpu:.0f}x "
              f"{'(>= 50x: met)' if ratio_cpu >= 50 else '(< 50x: NOT met)'}")
    # PyTorch's single-stage schedules (ScheduleGPipe, Schedule1F1B: _get_pipeline_order) are a
    # plain loop appending actions, no simulation; ours build the same rows from C-level runs
    # of tuples, so the ratio is bounded by the cost of creating the objects themselves
    floor = best(lambda: [list(map(tuple.__new__, repeat(pp.Action),
                                   zip(repeat(r), repeat("F"), range(256)))) for r in range(16)],
                 n)
    print(f"(gpipe, 1f1b: PyTorch's builder is a plain loop; creating their 16 x 256 Actions "
          f"alone takes {floor * 1e3:.2f} ms here, {CPU[0] * 1e3:.2f} ms of process time, so 50x "
          "is out of reach for any builder that returns its actions as Python objects)")


if __name__ == "__main__":
    main()
