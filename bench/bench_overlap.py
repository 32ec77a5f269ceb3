"""Time tpp.data_parallel.overlap.step_timeline on planner-sized ranks; prints ops, seconds and
ops per second.

Run: .venv/bin/python bench/bench_overlap.py
The planner calls the timeline once per layout it evaluates (cached by its inputs), so the cost
per call bounds how many layouts a search can afford. Also prints, side by side, the timeline
against the closed form of :mod:`tpp.symbolic.overlap` for the bucketed all-reduce (their ratio
must be 1).
"""

from __future__ import annotations

import time

from tpp.data_parallel.overlap import DPTraffic, Link, TPTraffic, step_timeline
from tpp.symbolic import overlap as so

NIC, NV = Link.preset("ib_ndr", "nic"), Link.preset("nvlink4", "nvlink")
CASES = [  # (layers on the rank, microbatches, ZeRO stage, with TP)
    (20, 2, 1, False), (20, 4, 3, False), (80, 4, 3, False), (20, 8, 1, True),
    (80, 16, 2, False), (20, 64, 0, True),
]


def main() -> None:
    print(f"{'layers':>6} {'M':>4} {'ZeRO':>4} {'TP':>3} {'ops':>7} {'s/call':>8} {'ops/s':>9}")
    for n, m, stage, with_tp in CASES:
        dp = DPTraffic(stage, 64, 400_000_000, NIC, bucket_bytes=128_000_000)
        tp = TPTraffic(0.4e-3, 0.8e-3, NV) if with_tp else None
        t0 = time.perf_counter()
        tl = step_timeline([3e-3] * n, [6e-3] * n, microbatches=m, dp=dp, tp=tp)
        dt = time.perf_counter() - t0
        ops = len(tl.events)
        print(f"{n:>6} {m:>4} {stage:>4} {'y' if with_tp else 'n':>3} {ops:>7} {dt:>8.4f} "
              f"{ops / dt:>9.0f}")
    print("\nbucketed all-reduce, timeline / closed form:")
    for n_layers, k, tb, tc in ((32, 2, 2e-3, 1e-3), (32, 4, 2e-3, 9e-3), (12, 3, 1e-3, 3e-3)):
        beta = float(so.bucket_time(8, k * 10**7, 0, 1)) / tc
        tl = step_timeline([0.0] * n_layers, [tb] * n_layers, contention=0.18,
                           dp=DPTraffic(0, 8, 10**7, Link("nic", beta), bucket_bytes=k * 10**7))
        sym = so.exposed_numeric(n_layers, k, tb, tc, 0.18)
        print(f"  L={n_layers} k={k}: {tl.exposed_total:.6f} s / {sym:.6f} s = "
              f"{tl.exposed_total / sym:.12f}")


if __name__ == "__main__":
    main()
