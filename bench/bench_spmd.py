"""Benchmark the simulated engine: what running rank programs as threads costs.

The list-of-arrays API (``ShardedMLP``) runs the per-rank programs with
``tpp.collectives.spmd`` (one thread per rank, meeting at every collective). This script times,
side by side in one run, one forward+backward of the tensor-parallel MLP

* through ``ShardedMLP`` (threads, the course's code path), and
* written out over lists with direct ``ProcessGroup`` calls (no threads, the old code path),

and prints the ratio. Both produce bit-identical results (asserted). Optional: with torch
installed, ``--real`` also times the same step on gloo processes (start-up excluded).

Usage: ``.venv/bin/python bench/bench_spmd.py [--tp 4] [--tokens 64] [--repeats 50] [--real]``
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from tpp.collectives import ProcessGroup
from tpp.tensor_parallel import ShardedMLP, gelu, gelu_grad, shard_columns, shard_rows
from tpp.tensor_parallel.linear import linear_backward


def lists_step(x, dy, w1s, w2s, group):
    """The same step written over lists, with the collectives called on the group directly."""
    h = [x @ w for w in w1s]
    acts = [gelu(u) for u in h]
    z = [act @ w for act, w in zip(acts, w2s, strict=True)]
    ys = group.all_reduce(z, tag="g.forward")
    dxs = []
    for u, act, w1, w2 in zip(h, acts, w1s, w2s, strict=True):
        da, _ = linear_backward(act, w2, dy)
        dx, _ = linear_backward(x, w1, da * gelu_grad(u))
        dxs.append(dx)
    return ys[0], group.all_reduce(dxs, tag="f.backward")[0]


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tp", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--real", action="store_true", help="also time gloo processes")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    w1, w2 = rng.standard_normal((a.d, 4 * a.d)), rng.standard_normal((4 * a.d, a.d))
    x, dy = rng.standard_normal((a.tokens, a.d)), rng.standard_normal((a.tokens, a.d))
    w1s, w2s = shard_columns(w1, a.tp), shard_rows(w2, a.tp)

    def threads():
        m = ShardedMLP(w1, w2, a.tp)
        return m.forward(x), m.backward(dy)

    def lists():
        w1s_, w2s_ = shard_columns(w1, a.tp), shard_rows(w2, a.tp)   # as ShardedMLP does
        return lists_step(x, dy, w1s_, w2s_, ProcessGroup(a.tp))

    (y1, dx1), (y2, dx2) = threads(), lists()
    assert np.array_equal(y1, y2) and np.array_equal(dx1, dx2)
    t_thr, t_lst = best_of(threads, a.repeats), best_of(lists, a.repeats)
    print(f"TP={a.tp}, {a.tokens} tokens, d={a.d}: one forward+backward")
    print(f"  lists + direct ProcessGroup calls : {t_lst * 1e3:8.3f} ms")
    print(f"  ShardedMLP (rank threads, spmd)   : {t_thr * 1e3:8.3f} ms")
    print(f"  ratio threads / lists             : {t_thr / t_lst:8.2f}")
    if a.real:
        from tpp.distributed import World, programs

        args = [(x, w1s[r], w2s[r], None, dy) for r in range(a.tp)]
        with World(a.tp) as world:
            world.run(programs.tp_mlp_step, args)              # warm-up
            t_real = best_of(lambda: world.run(programs.tp_mlp_step, args), 10)
        print(f"  gloo processes (start-up excluded): {t_real * 1e3:8.3f} ms "
              f"({t_real / t_lst:.1f} x lists)")


if __name__ == "__main__":
    main()
