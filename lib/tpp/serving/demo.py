"""``tpp demo``: the serving lesson's "run it locally" program, with its results stated honestly.

Three results, NumPy only, in a few seconds:

1. The tensor-parallel SwiGLU MLP (the lesson's ``ShardedFFN``) against the unsharded one at
   TP1-TP11: equal in real arithmetic (chapter 02 proves the identity), equal to float64
   rounding in practice, and bitwise equal across the ranks of each group (the ring all-reduce
   hands every rank the same reduced chunks).
2. The GQA divisibility rule: TP16 on a model with 8 KV heads is refused with a ``ValueError``
   that says what to change, and works once KV heads are replicated.
3. The decode-step table: TP8 beats TP1 on NVLink but loses to it over 200G Ethernet at batch
   512, under the lesson's assumptions, with the memory check the lesson leaves out (TP1 of a
   70B model does not fit on an 80 GB GPU, so its times are hypothetical).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tpp.hardware import GB
from tpp.serving.decode import decode_step
from tpp.tensor_parallel.attention import ShardedAttention, init_attention_weights
from tpp.tensor_parallel.mlp import MLP, ShardedMLP

__all__ = ["DemoResult", "run_demo", "TP_DEGREES", "TABLE_CASES"]

TP_DEGREES = tuple(range(1, 12))
#: (column title, interconnect preset, batch) of the decode-step table
TABLE_CASES = (("NVLink b=16", "nvlink4", 16), ("NVLink b=512", "nvlink4", 512),
               ("PCIe5 b=512", "pcie5_x16", 512), ("Ethernet b=512", "eth_200g", 512))
TABLE_TP = (1, 2, 4, 8)


@dataclass
class DemoResult:
    """What the demo computed (the printed text is in ``lines``)."""

    rel_error: dict[int, float] = field(default_factory=dict)
    ranks_bitwise_equal: dict[int, bool] = field(default_factory=dict)
    gqa_error: str = ""
    gqa_replicated_ok: bool = False
    step_ms: dict[tuple[str, int], float] = field(default_factory=dict)
    fits: dict[int, bool] = field(default_factory=dict)
    seconds: float = 0.0
    lines: list[str] = field(default_factory=list)


def _agreement(result: DemoResult, say: Callable[[str], None]) -> None:
    d, d_ff = 16, 27720                 # 27720 = lcm(1..11): every degree divides d_ff
    rng = np.random.default_rng(0)
    w1, w3 = (rng.standard_normal((d, d_ff)) / np.sqrt(d) for _ in range(2))
    w2 = rng.standard_normal((d_ff, d)) / np.sqrt(d_ff)
    x = rng.standard_normal((4, d))
    ref = MLP(w1, w2, "swiglu", w3).forward(x)
    say("1. SwiGLU MLP, W1/W3 column-sharded, W2 row-sharded, one all-reduce "
        f"(d={d}, d_ff={d_ff}, float64)")
    for tp in TP_DEGREES:
        mlp = ShardedMLP(w1, w2, tp, "swiglu", w3)
        y = mlp.forward(x)
        result.rel_error[tp] = float(np.abs(y - ref).max() / np.abs(ref).max())
        result.ranks_bitwise_equal[tp] = all(np.array_equal(o, mlp.outputs[0])
                                             for o in mlp.outputs)
    say("   TP  : " + " ".join(f"{tp:>7d}" for tp in TP_DEGREES))
    say("   err : " + " ".join(f"{result.rel_error[tp]:7.0e}" for tp in TP_DEGREES))
    say("   max |sharded - unsharded| / max |unsharded| above: equal to float64 rounding "
        "(the identity is exact in real arithmetic: chapter 02);")
    ok = all(result.ranks_bitwise_equal.values())
    say(f"   ranks of every group hold bitwise-equal outputs: {'yes' if ok else 'NO'}")


def _gqa(result: DemoResult, say: Callable[[str], None]) -> None:
    n_heads, n_kv, tp = 16, 8, 16
    w = init_attention_weights(32, n_heads, n_kv, d_head=4)
    say(f"2. GQA: {n_heads} query heads, {n_kv} KV heads, TP{tp}")
    try:
        ShardedAttention(w["wq"], w["wk"], w["wv"], w["wo"], tp, n_heads, n_kv)
    except ValueError as exc:
        result.gqa_error = str(exc)
        say(f"   refused: ValueError: {exc}")
    else:  # pragma: no cover - the rule is broken if this happens
        say("   NOT refused: the divisibility rule is missing")
    att = ShardedAttention(w["wq"], w["wk"], w["wv"], w["wo"], tp, n_heads, n_kv,
                           replicate_kv=True)
    result.gqa_replicated_ok = att.split.replicas == tp // n_kv
    say(f"   with replicate_kv=True: each KV head lives on {att.split.replicas} ranks")


def _table(result: DemoResult, say: Callable[[str], None]) -> None:
    say("3. Decode step of a 70B model (70e9 params, bf16, H100 SXM 80 GB), the lesson's "
        "assumptions: weights only, memory-bound, no overlap, no latency")
    say("   " + f"{'':5s}{'weights/GPU':>14s}" + "".join(f"{c[0]:>17s}" for c in TABLE_CASES))
    for tp in TABLE_TP:
        row = []
        for title, link, batch in TABLE_CASES:
            st = decode_step("llama2_70b", tp, batch, link, n_params=70e9)
            result.step_ms[(title, tp)] = st.step_time * 1e3
            result.fits[tp] = st.fits
            row.append(f"{st.step_time * 1e3:14.1f} ms")
        mem = f"{st.memory_bytes_per_gpu / GB:.1f} GB" + ("" if st.fits else " (!)")
        say(f"   TP{tp:<3d}{mem:>14s}" + "".join(row))
        if not st.fits:
            say(f"   {'':5s}(!) does not fit, by {st.overflow_bytes / GB:.1f} GB")
    for title, _, _ in TABLE_CASES:
        t1, t8 = result.step_ms[(title, 1)], result.step_ms[(title, 8)]
        say(f"   {title:15s}: TP8 {'wins' if t8 < t1 else 'loses'} against TP1 "
            f"({t8:.1f} vs {t1:.1f} ms)")
    over = [tp for tp in TABLE_TP if not result.fits[tp]]
    say(f"   caveat: {', '.join(f'TP{t}' for t in over)} cannot run (weights + KV cache > "
        "80 GB), so its times are hypothetical; among layouts that fit, TP2 also beats "
        "TP8 over Ethernet at batch 512 ("
        f"{result.step_ms[('Ethernet b=512', 2)]:.1f} vs "
        f"{result.step_ms[('Ethernet b=512', 8)]:.1f} ms).")


def run_demo(say: Callable[[str], None] | None = None) -> DemoResult:
    """Run the three parts, printing through ``say`` (default: ``print``)."""
    result = DemoResult()

    def emit(line: str) -> None:
        result.lines.append(line)
        (say or print)(line)

    start = time.perf_counter()
    _agreement(result, emit)
    _gqa(result, emit)
    _table(result, emit)
    result.seconds = time.perf_counter() - start
    emit(f"done in {result.seconds:.1f} s")
    return result
