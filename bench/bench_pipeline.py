"""Time building + simulating pipeline schedules; prints total time and time per action.

Run: .venv/bin/python bench/bench_pipeline.py
Goal (issue 3): P=64, M=512, v=4 interleaved well under one second; (issue 14) DualPipeV
P=64, M=512 built + simulated under one second.
"""

from __future__ import annotations

import time

from tpp import pipeline as pp

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


def bench(name: str, P: int, M: int, v: int, repeats: int = 3) -> tuple[float, float, int]:
    best_build = best_total = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        s = pp.schedule(name, P, M, v)
        t1 = time.perf_counter()
        r = pp.simulate(s, t_f=1, t_b=2, t_w=1 if name != "interleaved" else 0, overlap=2)
        t2 = time.perf_counter()
        best_build = min(best_build, t1 - t0)
        best_total = min(best_total, t2 - t0)
    assert r.makespan > 0
    return best_build, best_total, s.num_actions


def main() -> None:
    print(f"{'schedule':>12} {'P':>4} {'M':>5} {'v':>2} {'actions':>8} {'build s':>8} "
          f"{'build+sim s':>11} {'us/action':>9}")
    totals = {}
    for name, P, M, v in CASES:
        build, total, n = bench(name, P, M, v)
        totals[(name, P, M, v)] = total
        print(f"{name:>12} {P:>4} {M:>5} {v:>2} {n:>8} {build:>8.3f} {total:>11.3f} "
              f"{1e6 * total / n:>9.2f}")
    for key in (("dualpipev", 64, 512, 2), ("interleaved", 64, 512, 4)):
        t = totals[key]
        print(f"goal: {key[0]} P={key[1]} M={key[2]} v={key[3]} built + simulated in "
              f"{t:.3f} s (best of 3) -> {'met' if t < 1 else 'NOT met'} (< 1 s)")


if __name__ == "__main__":
    main()
