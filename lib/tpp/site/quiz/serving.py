"""Questions of the serving chapter (17): the page's six and the graded quiz's six."""

from __future__ import annotations

from fractions import Fraction

from tpp.hardware import GB, gpu
from tpp.models import model

from .question import Question, R, W, _frac, _q


def page() -> list[Question]:
    """The serving lesson's six "Check yourself" questions, in the course's words."""
    ch = "17_serving"
    m = model("llama2_70b")
    h100 = gpu("h100_sxm")
    wb = m.weight_bytes("bf16")
    return [
        _q("s17-megatron", ch,
           "In the Megatron pattern, why is the first FFN matmul column-sharded and the second "
           "row-sharded?",
           ("Each rank gets a slice of the hidden units, the activation acts on that slice, and "
            "the row-sharded W2 gives partial sums of the output: one all-reduce per sublayer",
            R, "Right. Chapter 02, 'Column-then-row, in blocks', counts the one collective."),
           ("A column-sharded matmul runs faster on a GPU", W, "Both shards do 1/T of the "
            "FLOPs; the reason is communication. Reread chapter 02, 'Derivation'."),
           ("Row-then-column works as well, with the same single all-reduce", W,
            "Row-sharding W1 leaves partial sums before the nonlinearity. Reread chapter 02, "
            "'Why not row-then-column?'."),
           ("W1 is larger than W2", W, "They hold the same number of weights. Reread chapter "
            "02, 'Derivation'.")),
        _q("s17-fit", ch,
           f"A 70B model ({wb / GB:.0f} GB in bf16) is served on {h100.memory / GB:.0f} GB "
           "H100s at batch 16 with no context. Which statement is right?",
           ("TP1 is about 8 times slower than TP8, so TP8 is better", W, "TP1 cannot run at "
            "all. Reread chapter 17, 'Memory first'."),
           (f"TP1 cannot run: the weights alone exceed the GPU by {(wb - h100.memory) / GB:.0f} "
            "GB", R, "Right. Chapter 17, 'Memory first', checks every layout before timing it."),
           ("Memory does not matter for decode, only bandwidth", W, "A layout that does not fit "
            "does not run. Reread chapter 17, 'Memory first'.")),
        _q("s17-bound", ch,
           "Why is a decode step memory-bound and a prefill compute-bound?",
           (f"Decode does about batch FLOPs per byte in bf16, far below the H100's "
            f"~{h100.ridge_point:.0f}; prefill does it per prompt token", R,
            "Right. Chapter 17, 'Prefill and decode', derives I = 2n/e."),
           ("Decode reads the KV cache and prefill does not", W, "Even without the cache decode "
            "is memory-bound. Reread chapter 17, 'Prefill and decode'."),
           ("Decode computes in float32", W, "Same precision. Reread chapter 17, 'Prefill and "
            "decode'.")),
        _q("s17-pp", ch,
           "Adding two pipeline stages to a TP8 decode deployment (TP8 × PP2, two request "
           "groups) mainly…",
           ("halves the time per token", W, "Each GPU still reads its share of the weights per "
            "token. Reread chapter 17, 'TP for latency, PP for capacity, DP for throughput'."),
           ("halves the memory per GPU while the time per token stays about the same", R,
            "Right. Chapter 17, 'TP for latency, PP for capacity, DP for throughput'."),
           ("adds a bubble no number of request groups removes", W, "In steady decode the "
            "bubble is 1 - m/p and vanishes at m = p. Reread chapter 17, 'The lesson's "
            "simulator walk-through, checked'.")),
        _q("s17-sample", ch,
           "Four TP ranks with identically seeded generators each sample their own token from "
           "ring-all-reduced logits. In the course's simulation, when do they split?",
           ("Within a few tokens", W, "That is what per-rank seeds do. Reread chapter 17, "
            "'Every rank must sample the same token'."),
           ("Never: the ring hands every rank bitwise-equal logits", R,
            "Right. Chapter 17, 'Every rank must sample the same token'."),
           ("Only at temperature 0", W, "Greedy decoding splits only on exact ties, and equal "
            "logits have none. Reread chapter 17, 'Every rank must sample the same token'.")),
        _q("s17-ethernet", ch,
           "Over Ethernet at batch 512, which TP degree does the decode model prefer among "
           "layouts of the 70B model that fit?",
           ("The largest: more GPUs always shorten the step", W, "Past the crossover bandwidth "
            "each added rank slows the token. Reread chapter 06, 'The crossover'."),
           ("The smallest that fits: each doubling pays only on links faster than the "
            "crossover bandwidth", R, "Right. Chapter 06, 'The crossover', and chapter 17, "
            "'The lesson's simulator walk-through, checked'."),
           ("TP1, as the lesson's simulator shows", W, "TP1 does not fit. Reread chapter 17, "
            "'Memory first'.")),
    ]


def graded() -> list[Question]:
    """The graded quiz (ex17_quiz): held out of the page, one per page question's topic."""
    ch = "17_serving"
    big = model("llama3_405b")
    h100, h200 = gpu("h100_sxm"), gpu("h200_sxm")
    need = big.weight_bytes("bf16") / h100.memory
    fit = next(2 ** k for k in range(12) if 2 ** k >= need)
    ridge = h200.ridge_point
    p, m = 4, 2
    bubble = Fraction(1) - Fraction(m, p)
    g = dict(graded=True)
    return [
        _q("g1", ch, "In the SwiGLU MLP of the Megatron pattern, how is the gate matrix W3 "
           "sharded?",
           ("By columns, like W1: the element-wise product needs matching slices", R,
            "Right. Chapter 02, 'Column-then-row, in blocks'."),
           ("By rows, like W2", W, "Reread chapter 02, 'Column-then-row, in blocks'."),
           ("Replicated on every rank", W, "Reread chapter 02, 'Work and memory per device'."),
           ("It cannot be sharded", W, "Reread chapter 02, 'Column-then-row, in blocks'."), **g),
        _q("g2", ch, f"{big.name} in bf16 on {h100.memory / GB:.0f} GB H100s, counting weights "
           "only: what is the smallest power-of-two number of GPUs that holds them?",
           (str(fit // 2), W, "Reread chapter 17, 'Memory first'."),
           (str(fit), R, "Right. Chapter 17, 'Memory first'."),
           (str(fit * 2), W, "Reread chapter 17, 'Memory first'."),
           (str(fit // 4), W, "Reread chapter 17, 'Memory first'."), **g),
        _q("g3", ch, "On an H200 in bf16, from about which batch does a decode step stop being "
           "memory-bound?",
           (f"about {ridge:.0f}", R, "Right. Chapter 17, 'Prefill and decode'."),
           (f"about {ridge / 2:.0f}", W, "Reread chapter 17, 'Prefill and decode'."),
           (f"about {2 * ridge:.0f}", W, "Reread chapter 17, 'Prefill and decode'."),
           ("about 1", W, "Reread chapter 17, 'Prefill and decode'."), **g),
        _q("g4", ch, f"Steady decode on PP = {p} stages with m = {m} request groups in flight: "
           "what share of each stage's time is idle?",
           ("0", W, "Reread chapter 17, 'TP for latency, PP for capacity, DP for throughput'."),
           (_frac(bubble), R, "Right. Chapter 17, 'TP for latency, PP for capacity, DP for "
            "throughput'."),
           (_frac(Fraction(p - 1, p)), W, "Reread chapter 17, 'TP for latency, PP for capacity, "
            "DP for throughput'."),
           (_frac(Fraction(p - 1, m + p - 1)), W, "That is training's GPipe bubble. Reread "
            "chapter 17, 'TP for latency, PP for capacity, DP for throughput'."), **g),
        _q("g5", ch, "Which fix makes TP ranks emit the same token whatever their reduction "
           "order?",
           ("Sample on rank 0 and broadcast the token", R,
            "Right. Chapter 17, 'Every rank must sample the same token'."),
           ("Seed each rank's generator with its rank", W,
            "Reread chapter 17, 'Every rank must sample the same token'."),
           ("Lower the temperature", W,
            "Reread chapter 17, 'Every rank must sample the same token'."),
           ("Reduce in bf16", W,
            "Reread chapter 17, 'Every rank must sample the same token'."), **g),
        _q("g6", ch, "In the decode model t(N) = 2C + (W/R - 2C)/N, how does the crossover "
           "bandwidth change when the batch doubles?",
           ("It doubles", R, "Right. Chapter 06, 'The crossover': β* = 2 n_AR b d e R / W."),
           ("It halves", W, "Reread chapter 06, 'The crossover'."),
           ("It stays the same", W, "Reread chapter 06, 'The crossover'."),
           ("It depends on the TP degree", W, "Reread chapter 06, 'The crossover'."), **g),
    ]
