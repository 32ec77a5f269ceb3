"""Time the planner's full search on 16,384 GPUs (issue 8: seconds, not minutes).

Run: .venv/bin/python bench/bench_planner.py
Prints, in one run: candidate layouts, layouts evaluated, search time cold (empty pipeline
cache) and warm, and the evaluations per second; plus one evaluate() for scale.
"""

from __future__ import annotations

import time

from tpp import models, planner
from tpp.planner import estimate


def main() -> None:
    model = models.model("llama3_405b")
    kw = dict(seq_len=8192, global_batch=2048)
    t0 = time.perf_counter()
    cands = planner.candidate_layouts(model, 16384, **kw)
    t1 = time.perf_counter()
    estimate._pipeline.cache_clear()
    t2 = time.perf_counter()
    best = planner.plan(model, 16384, top=3, **kw)
    t3 = time.perf_counter()
    best_warm = planner.plan(model, 16384, top=3, **kw)
    t4 = time.perf_counter()
    info = estimate._pipeline.cache_info()
    estimate._pipeline.cache_clear()
    t5 = time.perf_counter()
    planner.evaluate(model, best[0].layout, **kw)
    t6 = time.perf_counter()
    assert [e.layout for e in best] == [e.layout for e in best_warm]
    print("Llama 3 405B on 16,384 H100s, seq 8192, global batch 2048 sequences")
    print(f"candidate layouts (rules pass):     {len(cands):>8d}   in {t1 - t0:8.3f} s")
    print(f"pipelines simulated (distinct):     {info.currsize:>8d}")
    print(f"plan(), cold cache:                 {t3 - t2:8.3f} s")
    print(f"plan(), warm cache:                 {t4 - t3:8.3f} s")
    print(f"one evaluate(), cold:               {t6 - t5:8.3f} s")
    print(f"cold search / one evaluate:         {(t3 - t2) / (t6 - t5):8.0f} x")
    print("best:", best[0].explain())


if __name__ == "__main__":
    main()
