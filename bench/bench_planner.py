"""The planner against every published run it stores, and its full search on 16,384 GPUs.

Run: .venv/bin/python bench/bench_planner.py
Prints (1) each published run's predicted and measured seconds per step, their ratio, whether
the planner says it fits (GB needed of the GB the CUDA runtime offers), the median and worst
|predicted/measured - 1| (issue 18: at most 10 % and 25 %), and the same for the old flat model
(mfu=0.4) and with every run's TP collectives blocking side by side, for the runs the planner
was built against and, apart, for the hold-out runs (Megatron-LM's H100 table); (2) the search
on 16,384 GPUs (issue 8: seconds, not minutes): candidate layouts, search time cold (empty pipeline
cache) and warm, one evaluate() for scale.
"""

from __future__ import annotations

import time

from tpp import models, planner
from tpp.planner import estimate


def table(holdout: bool = False) -> None:
    rows = planner.compare_published(holdout=holdout)
    flat = {r.published.key: r for r in planner.compare_published(holdout=holdout, mfu=0.4)}
    # the runs' TP collectives blocking, whatever their source says (before --tp-comm-overlap)
    block = {r.published.key: r for r in planner.compare_published(holdout=holdout,
                                                                    tp_comm_overlap=False)}
    print("HOLD-OUT (Megatron-LM README H100 table: no number adjusted to it; its "
          "--tp-comm-overlap read from the README)" if holdout
          else "Runs the planner was built against")
    print(f"{'run':32s} {'GPUs':>6s} {'measured':>9s} {'predicted':>9s} {'ratio':>6s}"
          f" {'GB':>6s} {'of':>5s} {'fits':>5s} {'mfu=0.4':>8s} {'TPblock':>8s}")
    for r in rows:
        k, e = r.published.key, r.estimate
        print(f"{k:32s} {r.published.gpus:6d} {r.measured:9.2f} {r.predicted:9.2f}"
              f" {r.ratio:6.3f} {e.memory_bytes / 1e9:6.2f} {e.capacity / 1e9:5.1f}"
              f" {'yes' if e.fits else 'NO':>5s} {flat[k].ratio:8.3f} {block[k].ratio:8.3f}")
    med, worst = planner.error_summary(rows)
    fmed, fworst = planner.error_summary(list(flat.values()))
    bmed, bworst = planner.error_summary(list(block.values()))
    print(f"|pred/meas - 1| over {len(rows)} runs: median {med:.1%}, worst {worst:.1%} "
          f"(flat mfu=0.4: median {fmed:.1%}, worst {fworst:.1%}; TP blocking: median "
          f"{bmed:.1%}, worst {bworst:.1%}); "
          f"{sum(not r.estimate.fits for r in rows)} declared not to fit")
    print()


def main() -> None:
    table()
    table(holdout=True)
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
