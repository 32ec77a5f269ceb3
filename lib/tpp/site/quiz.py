"""Check-yourself questions: one source for the site's self-checks and the graded quiz.

Each :class:`Question` belongs to a chapter and has options, exactly one of them correct, each
with an explanation that names the section to reread. ``graded=True`` marks the questions of the
graded notebook ``solutions/ex17_quiz.ipynb``: they are **held out of the page** (the site shows
only ``graded=False`` questions), so the public self-check never hands out the graded key.

Numbers in the questions are computed here from ``tpp`` (ring factors, bubble fractions, ZeRO
model states, hardware presets), so when the library changes the next build changes the quiz.
The serving chapter's six page questions follow the serving lesson's "Check yourself" (seed 2),
written in the course's words.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from fractions import Fraction
from functools import cache

from tpp.costs.context_parallel import attention_work_per_rank
from tpp.costs.tp import ring_factor
from tpp.costs.zero import model_state_bytes
from tpp.hardware import GB, gbit_per_s, gpu, link
from tpp.models import model
from tpp.symbolic import pipeline as sym_pipeline

__all__ = ["Option", "Question", "questions", "page_questions", "graded_questions",
           "chapters", "letters", "correct_letter", "question_markdown", "render_html",
           "sync_master"]

LETTERS = "ABCDEFGH"


@dataclass(frozen=True)
class Option:
    """One choice: its text, whether it is the right one, and why (naming what to reread)."""

    text: str
    correct: bool
    explanation: str


@dataclass(frozen=True)
class Question:
    """A multiple-choice question of ``chapter`` (e.g. ``"07_gpipe"``)."""

    id: str
    chapter: str
    stem: str
    options: tuple[Option, ...]
    graded: bool = False

    def __post_init__(self) -> None:
        n_right = sum(o.correct for o in self.options)
        if n_right != 1:
            raise ValueError(f"question {self.id}: {n_right} correct options; mark exactly one")
        if not 2 <= len(self.options) <= len(LETTERS):
            raise ValueError(f"question {self.id}: give 2 to {len(LETTERS)} options")
        for o in self.options:
            if not o.explanation.strip():
                raise ValueError(f"question {self.id}: option {o.text!r} needs an explanation")


def _q(qid: str, chapter: str, stem: str, *opts: tuple[str, bool, str],
       graded: bool = False) -> Question:
    return Question(qid, chapter, stem, tuple(Option(*o) for o in opts), graded)


def _pct(x) -> str:
    return f"{100 * float(x):.1f} %"


def _frac(x: Fraction) -> str:
    return str(x) if x.denominator != 1 else str(x.numerator)


R, W = True, False   # right / wrong, for short option tuples


@cache
def questions() -> tuple[Question, ...]:
    """Every question, page and graded, in chapter order."""
    qs: list[Question] = []
    add = qs.append

    # ---------------------------------------------------------------- 01 collectives
    n = 8
    f_ar = ring_factor("all_reduce", n)
    add(_q("c01-ring", "01_collectives",
           f"A ring all-reduce runs over {n} ranks on a payload of V bytes. How many bytes does "
           "each rank send?",
           (f"{_frac(f_ar)} V, that is 2(N-1)/N V", R,
            "Right. Chapter 01, 'Derivation': a reduce-scatter and an all-gather, each sending "
            "(N-1)/N V."),
           (f"V/{n}", W, "That is the size of one chunk, sent once per step over 2(N-1) steps. "
            "Reread chapter 01, 'Derivation'."),
           (f"{n - 1} V", W, "A naive all-to-all would send that; the ring keeps it below 2V. "
            "Reread chapter 01, 'Intuition'."),
           ("2 V exactly", W, "2V is the bound as N grows, never reached. Reread chapter 01, "
            "'Derivation'.")))
    nv = link("nvlink4")
    bi = round(2 * nv.bandwidth / GB)
    per = round(nv.bandwidth / GB)
    add(_q("c01-units", "01_collectives",
           f"A datasheet gives NVLink as {bi} GB/s. Which bandwidth goes into the α–β time of a "
           "ring collective?",
           (f"{per} GB/s: the datasheet's figure counts both directions", R,
            "Right. Chapter 01, 'What we keep', last bullet."),
           (f"{bi} GB/s", W, "That is the bidirectional total; a ring sends one way per link. "
            "Reread chapter 01, 'What we keep'."),
           (f"{bi / 8:g} GB/s", W, "That reads the figure as gigabits; NVLink's is in bytes. "
            "Reread chapter 01, 'What we keep'.")))

    # ---------------------------------------------------------------- 02 TP MLP
    add(_q("c02-why", "02_tp_mlp",
           "Why does the tensor-parallel MLP shard W1 by columns and W2 by rows, not the other "
           "way round?",
           ("Row-sharding W1 leaves partial sums before the nonlinearity, and σ(a+b) ≠ σ(a)+σ(b)",
            R, "Right. Chapter 02, 'Why not row-then-column?'."),
           ("Column-sharded matmuls are faster on GPUs", W, "Both splits give each rank 1/T of "
            "the FLOPs. Reread chapter 02, 'Work and memory per device'."),
           ("W1 is larger than W2", W, "W1 (d × d_ff) and W2 (d_ff × d) hold the same number "
            "of weights. Reread chapter 02, 'Derivation'.")))
    add(_q("c02-comm", "02_tp_mlp",
           "How much communication does the forward pass of the column-then-row MLP need?",
           ("One all-reduce of the n × d output", R,
            "Right. Chapter 02, 'Column-then-row, in blocks'."),
           ("An all-gather after W1 and an all-reduce after W2", W, "The hidden activation "
            "stays sharded; σ acts element-wise. Reread chapter 02, 'Column-then-row, in "
            "blocks'."),
           ("None", W, "Each rank holds a partial sum of the output; summing it is the "
            "all-reduce. Reread chapter 02, 'Derivation'.")))

    # ---------------------------------------------------------------- 03 f and g
    add(_q("c03-f", "03_f_and_g",
           "What is the backward of f, the operator that copies the input x to T ranks?",
           ("An all-reduce of the T input gradients", R, "Right. Chapter 03, 'The backward of "
            "a copy is a sum'."),
           ("The identity", W, "That is g's backward. Reread chapter 03, 'The backward of a "
            "sum is a copy'."),
           ("An all-gather", W, "Each rank's gradient is a partial over the full x, so they are "
            "summed, not concatenated. Reread chapter 03, 'The backward of a copy is a sum'.")))
    add(_q("c03-bug", "03_f_and_g",
           "A layer all-reduces in both directions for f and g. What shows the bug?",
           ("Only a gradient check: the forward output is right, the gradients T times too large",
            R, "Right. Chapter 03, 'Negative controls'."),
           ("The forward output", W, "Both bugs leave the forward intact. Reread chapter 03, "
            "'Negative controls'."),
           ("Nothing: an extra all-reduce is harmless", W, "It sums T equal copies. Reread "
            "chapter 03, 'What an all-reduce in both directions computes'.")))

    # ---------------------------------------------------------------- 04 TP attention
    m70 = model("llama3_70b")
    t = 2 * m70.n_kv_heads
    add(_q("c04-gqa", "04_tp_attention",
           f"LLaMA-3 70B has {m70.n_heads} query heads and {m70.n_kv_heads} KV heads. What "
           f"happens at TP = {t}?",
           (f"Each KV head is replicated on {t // m70.n_kv_heads} ranks", R,
            "Right. Chapter 04, 'KV heads per rank and the cost of replication'."),
           ("It is impossible", W, "TP may exceed the KV heads by replicating them. Reread "
            "chapter 04, 'KV heads per rank and the cost of replication'."),
           ("The KV heads split in halves along d_head", W, "A head is never split: its "
            "softmax needs all of it. Reread chapter 04, 'The head sum is the row-parallel "
            "split'.")))
    add(_q("c04-cost", "04_tp_attention",
           "What does replicating KV heads cost?",
           ("Memory: the KV cache and W_K, W_V per rank stop shrinking", R,
            "Right. Chapter 04, 'What we keep'."),
           ("Activation traffic: an extra all-reduce in every forward pass", W, "The forward "
            "still has one all-reduce. Reread chapter 04, 'The cost of replication for "
            "LLaMA-3 70B'.")))

    # ---------------------------------------------------------------- 05 SP
    add(_q("c05-bytes", "05_sequence_parallelism",
           "Compared with plain TP, how many bytes does TP+SP move in the forward pass of a block?",
           ("The same: each all-reduce becomes a reduce-scatter plus an all-gather", R,
            "Right. Chapter 05, 'Same bytes'."),
           ("Half", W, "RS + AG are exactly an all-reduce. Reread chapter 05, 'Same bytes'."),
           ("Twice as many", W, "Only keeping sequence shards for backward adds all-gathers. "
            "Reread chapter 05, 'Same bytes'.")))
    add(_q("c05-floor", "05_sequence_parallelism",
           "Without SP, what limits how far TP cuts activation memory per layer?",
           ("The 10 sbh of the replicated regions (LayerNorm, dropout, residual)", R,
            "Right. Chapter 05, 'Activation memory per layer'."),
           ("Nothing: TP divides all of it by t", W, "Only the parts inside the sharded "
            "matmuls. Reread chapter 05, 'Activation memory per layer'.")))

    # ---------------------------------------------------------------- 06 TP cost
    ib = 400
    add(_q("c06-bits", "06_tp_cost",
           f"A network card is rated {ib} Gb/s. What is that in GB/s?",
           (f"{gbit_per_s(ib) / GB:g} GB/s", R, "Right. Chapter 06, 'What we keep', second "
            "bullet: network rates are in bits."),
           (f"{ib} GB/s", W, "Gb is gigabits. Reread chapter 06, 'Training: bytes and seconds "
            "per step'."),
           (f"{ib * 8} GB/s", W, "Divide by 8, don't multiply. Reread chapter 06, 'Training: "
            "bytes and seconds per step'.")))
    add(_q("c06-count", "06_tp_cost",
           "How many all-reduces does one tensor-parallel transformer block run per training "
           "step, without recomputation?",
           ("Four: two forward, two backward", R, "Right. Chapter 06, 'Counting the "
            "collectives in a simulated block'."),
           ("Two", W, "That is the forward pass only. Reread chapter 06, 'Training: bytes and "
            "seconds per step'."),
           ("Six", W, "Six with full recomputation. Reread chapter 06, 'What we keep'.")))

    # ---------------------------------------------------------------- 07 GPipe
    P, M = 8, 32
    subs = {sym_pipeline.P: P, sym_pipeline.M: M}
    share = sym_pipeline.bubble_fraction("gpipe").subs(subs)
    ratio = sym_pipeline.bubble_ratio("gpipe").subs(subs)
    add(_q("c07-bubble", "07_gpipe",
           f"GPipe with P = {P} stages and M = {M} microbatches: what share of all rank-time "
           "is idle?",
           (f"{_pct(share)}, (P-1)/(M+P-1)", R, "Right. Chapter 07, 'Derivation: the makespan "
            "of GPipe'."),
           (f"{_pct(ratio)}, (P-1)/M", W, "That is the bubble relative to the ideal compute "
            "time, the other convention. Reread chapter 07, 'Derivation: the makespan of "
            "GPipe'."),
           (f"{_pct(Fraction(P - 1, P))}, (P-1)/P", W, "That is naive pipelining without "
            "microbatches. Reread chapter 07, 'Naive pipeline parallelism'.")))
    add(_q("c07-tb", "07_gpipe",
           "Does GPipe's bubble fraction change when the backward takes twice as long as the "
           "forward instead of as long?",
           ("No: it does not depend on t_B/t_F", R, "Right. Chapter 07, 'What we keep'."),
           ("Yes, it grows", W, "Fill, drain and busy time all scale with t_F + t_B. Reread "
            "chapter 07, 'Derivation: the makespan of GPipe'.")))

    # ---------------------------------------------------------------- 08 1F1B
    add(_q("c08-mem", "08_1f1b",
           "What does 1F1B change compared with GPipe?",
           ("Peak in-flight activations: rank r holds at most min(P-r, M) instead of M", R,
            "Right. Chapter 08, 'In-flight activations'."),
           ("The bubble: it shrinks", W, "Same makespan, same bubble. Reread chapter 08, "
            "'The makespan is GPipe's'."),
           ("The operations: it drops forwards", W, "The same operations, another order. "
            "Reread chapter 08, 'Intuition'.")))
    add(_q("c08-rank", "08_1f1b",
           "Under 1F1B, which rank holds the most activation sets?",
           ("Rank 0, the first stage", R, "Right. Chapter 08, 'In-flight activations': "
            "min(P-r, M) is largest at r = 0."),
           ("The last rank", W, "It runs each backward right after its forward and holds one. "
            "Reread chapter 08, 'In-flight activations'."),
           ("All ranks hold P", W, "P is rank 0's value. Reread chapter 08, 'Checking the "
            "lecture'.")))

    # ---------------------------------------------------------------- 09 interleaved
    v = 4
    sv = {sym_pipeline.P: P, sym_pipeline.M: M, sym_pipeline.v: v}
    share_i = sym_pipeline.bubble_fraction("interleaved").subs(sv)
    add(_q("c09-bubble", "09_interleaved",
           f"Interleaved 1F1B with P = {P}, M = {M}, v = {v}: what share of rank-time is idle?",
           (f"{_pct(share_i)}, (P-1)/(vM+P-1)", R, "Right. Chapter 09, 'Derivation'."),
           (f"{_pct(share)}, as without interleaving", W, "Interleaving cuts fill and drain "
            "into chunk-sized steps. Reread chapter 09, 'Intuition'."),
           (f"{_pct(sym_pipeline.seed1_interleaved_bubble().subs(sv))}, (1/v)(P-1)/(M+P-1)", W,
            "The lecture's form mixes the two conventions and underestimates. Reread chapter "
            "09, 'What we keep'.")))
    add(_q("c09-price", "09_interleaved",
           "What does interleaving pay for its smaller bubble?",
           ("More point-to-point traffic, by (vP-1)/(P-1), and more activation memory", R,
            "Right. Chapter 09, 'The price: point-to-point traffic' and 'The price: activation "
            "memory'."),
           ("Nothing", W, "Reread chapter 09, 'The price: point-to-point traffic'.")))

    # ---------------------------------------------------------------- 10 zero bubble
    add(_q("c10-split", "10_zero_bubble",
           "Why can zero-bubble schedules defer the weight gradient W but not the input "
           "gradient?",
           ("The previous stage waits for the input gradient; nobody waits for W until the "
            "optimizer step", R, "Right. Chapter 10, 'Intuition'."),
           ("W is cheaper to compute", W, "The costs don't decide it; the dependencies do. "
            "Reread chapter 10, 'Intuition'."),
           ("W needs no memory", W, "Deferring W keeps its inputs alive. Reread chapter 10, "
            "'Memory'.")))
    add(_q("c10-formula", "10_zero_bubble",
           "When does Qi et al.'s ZB-H1 bubble (P-1)(t_F + t_I - t_W) hold?",
           ("When t_W ≤ min(t_F, t_I): the W's fit into the gaps", R,
            "Right. Chapter 10, 'Figure: how long may W be?'."),
           ("Always", W, "For a long W the simulator's max(...) takes over. Reread chapter "
            "10, 'Derivation'.")))

    # ---------------------------------------------------------------- 11 PP cost
    add(_q("c11-ratio", "11_pp_cost",
           "Does a larger microbatch help a pipeline hide its stage-to-stage transfers?",
           ("No: transfer over compute does not depend on the microbatch size", R,
            "Right. Chapter 11, 'Compute per chunk, and which links hide the transfer'."),
           ("Yes: compute grows faster than the bytes", W, "Both grow linearly with b. Reread "
            "chapter 11, 'Compute per chunk, and which links hide the transfer'.")))
    add(_q("c11-why", "11_pp_cost",
           "Why is pipeline parallelism the axis that crosses nodes?",
           ("A stage boundary carries one activation per microbatch, little next to TP's "
            "all-reduces in every layer", R, "Right. Chapter 11, 'Derivation'."),
           ("It has no communication", W, "It sends b·s·h·e bytes per boundary and microbatch. "
            "Reread chapter 11, 'Derivation'.")))

    # ---------------------------------------------------------------- 12 V-shapes
    pv, rv = 4, 1
    add(_q("c12-v", "12_v_shapes",
           f"In a V-shaped schedule on P = {pv} ranks, which stages does rank {rv} hold?",
           (f"Stages {rv} and {2 * pv - 1 - rv}", R, "Right. Chapter 12, 'Intuition': stages "
            "r and 2P-1-r."),
           (f"Stages {rv} and {rv + pv}", W, "That is the interleaved (looped) placement. "
            "Reread chapter 12, 'Intuition'."),
           (f"Stage {rv} only", W, "A V has two stages per rank. Reread chapter 12, "
            "'Intuition'.")))
    add(_q("c12-makespan", "12_v_shapes",
           "Where does the course get any schedule's makespan from?",
           ("Its dependency graph: a max of a few linear forms in the costs", R,
            "Right. Chapter 12, 'Derivation: the makespan from the dependency graph'."),
           ("A closed form typed from the paper", W, "Closed forms are checked against the "
            "graph. Reread chapter 12, 'The closed form in P and M'.")))

    # ---------------------------------------------------------------- 13 ZeRO
    psi, nd = 7_500_000_000, 64
    z = {s: model_state_bytes(psi, nd, s) / GB for s in range(4)}
    add(_q("c13-z3", "13_data_parallel",
           f"Mixed-precision Adam, Ψ = {psi / 1e9:g}B parameters, N = {nd} data-parallel "
           "ranks with ZeRO-3: model states per rank?",
           (f"{z[3]:.3g} GB (16Ψ/N)", R, "Right. Chapter 13, 'Derivation: memory per rank, "
            "from the arrays a rank holds'."),
           (f"{z[0]:.3g} GB", W, "That is plain DP (16Ψ). Reread chapter 13, 'The ZeRO "
            "paper's headline figure'."),
           (f"{z[1]:.3g} GB", W, "That is ZeRO-1 (4Ψ + 12Ψ/N). Reread chapter 13, 'The ZeRO "
            "paper's headline figure'."),
           (f"{z[2]:.3g} GB", W, "That is ZeRO-2 (2Ψ + 14Ψ/N). Reread chapter 13, 'The ZeRO "
            "paper's headline figure'.")))
    add(_q("c13-z1", "13_data_parallel",
           "How many bytes per step does ZeRO-1 send, compared with plain DP?",
           ("The same: reduce-scatter + all-gather instead of one all-reduce", R,
            "Right. Chapter 13, 'Derivation: bytes per rank, from the ledger's structure'."),
           ("1.5 times as many", W, "That is ZeRO-3's extra all-gather. Reread chapter 13, "
            "'Derivation: bytes per rank, from the ledger's structure'.")))

    # ---------------------------------------------------------------- 13b hiding communication
    ch = "13b_hiding_communication"
    add(_q("c13b-last", ch,
           "A bucketed data-parallel all-reduce runs behind the backward on a link fast enough "
           "to keep up. What stays exposed?",
           ("At least the last bucket's all-reduce: nothing is left to hide it behind", R,
            "Right. Chapter 13b, 'Derivation: a bucketed all-reduce behind a backward'."),
           ("Nothing", W, "The last bucket is ready only when the backward ends. Reread "
            "chapter 13b, 'Derivation: a bucketed all-reduce behind a backward'."),
           ("The whole all-reduce", W, "Only a link that cannot keep up exposes that much. "
            "Reread chapter 13b, 'Simulation: the two-stream timeline'.")))
    add(_q("c13b-tp", ch,
           "Which collectives do not hide behind compute unless the matmuls are decomposed?",
           ("Tensor parallelism's, between dependent matmuls", R,
            "Right. Chapter 13b, 'A whole rank: TP, PP, DP and the distributed optimizer'."),
           ("FSDP's all-gathers", W, "They are prefetched one layer ahead. Reread chapter 13b, "
            "'The same structure: FSDP's prefetched forward'."),
           ("The distributed optimizer's parameter all-gather", W, "It hides behind the next "
            "step's first layers. Reread chapter 13b, 'A whole rank: TP, PP, DP and the "
            "distributed optimizer'.")))

    # ---------------------------------------------------------------- 14 composition
    add(_q("c14-order", "14_composition",
           "Why are ranks numbered TP fastest?",
           ("So that a TP group is one node, on NVLink; PP and DP groups cross nodes", R,
            "Right. Chapter 14, 'A rank map'."),
           ("So that DP groups are on NVLink", W, "DP sends once per step; TP in every layer. "
            "Reread chapter 14, 'Derivation: what one device sends per step, per axis'."),
           ("It does not matter", W, "The order decides which group crosses which link. "
            "Reread chapter 14, 'A rank map'.")))
    add(_q("c14-dp", "14_composition",
           "Per device, what does the DP gradient all-reduce scale with?",
           ("The parameters the device holds, Ψ/(TP·PP)", R,
            "Right. Chapter 14, 'Derivation: what one device sends per step, per axis'."),
           ("The number of microbatches", W, "DP reduces once per step. Reread chapter 14, "
            "'Derivation: what one device sends per step, per axis'.")))

    # ---------------------------------------------------------------- 15 CP
    cp = 4
    work = attention_work_per_rank(1024 * cp, cp)
    imb = Fraction(max(work) * cp, sum(work))
    add(_q("c15-causal", "15_context_parallel",
           f"A causal sequence split in {cp} contiguous blocks over CP = {cp} ranks: how much "
           "work does the busiest rank do, relative to the mean?",
           (f"About {float(imb):.2f} times, (2c_p - 1)/c_p", R,
            "Right. Chapter 15, 'Work per rank under a causal mask'."),
           ("The same: each rank has s/c_p queries", W, "Later queries see more keys. Reread "
            "chapter 15, 'Work per rank under a causal mask'."),
           (f"{cp} times", W, "The last rank sees all blocks, but the mean is not the first "
            "rank's. Reread chapter 15, 'Work per rank under a causal mask'.")))
    add(_q("c15-merge", "15_context_parallel",
           "Is merging two partial softmax results over disjoint keys exact?",
           ("Yes: rescale each by exp(m_i - m) and add; the max only avoids overflow", R,
            "Right. Chapter 15, 'Merging two partial softmax results is exact'."),
           ("Only approximately", W, "The shift cancels. Reread chapter 15, 'Merging two "
            "partial softmax results is exact'.")))

    # ---------------------------------------------------------------- 16 EP
    add(_q("c16-count", "16_expert_parallel",
           "How many all-to-alls does an expert-parallel MoE layer run per training step?",
           ("Four: dispatch and combine, forward and backward", R,
            "Right. Chapter 16, 'Bytes of one all-to-all'."),
           ("Two", W, "That is the forward. Reread chapter 16, 'Bytes of one all-to-all'."),
           ("One all-reduce instead", W, "That is TP. Reread chapter 16, 'Against tensor "
            "parallelism'.")))
    add(_q("c16-skew", "16_expert_parallel",
           "What does a capacity factor do under a skewed router?",
           ("Bounds each rank's load and bytes, and drops the rows beyond it", R,
            "Right. Chapter 16, 'A skewed router'."),
           ("Balances the routing without loss", W, "Rows beyond capacity are dropped and must "
            "be counted. Reread chapter 16, 'A skewed router'.")))

    qs.extend(_serving_page())
    qs.extend(_serving_graded())

    # ---------------------------------------------------------------- 18 real engine
    add(_q("c18-same", "18_real_engine",
           "How does the course run the same layer on simulated ranks and on torch.distributed?",
           ("The layer is the program of one rank on a communicator; only the communicator "
            "changes", R, "Right. Chapter 18, 'Intuition'."),
           ("It keeps two implementations and tests they agree", W, "One copy of the code. "
            "Reread chapter 18, 'Intuition'.")))
    add(_q("c18-alpha", "18_real_engine",
           "Where do the α and β of the α–β model come from?",
           ("They belong to the machine: fit them to an all-reduce sweep where you run", R,
            "Right. Chapter 18, 'Timing: α and β on this machine'."),
           ("From the NCCL documentation", W, "They are measured. Reread chapter 18, 'Timing: "
            "α and β on this machine'.")))
    return tuple(qs)


def _serving_page() -> list[Question]:
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


def _serving_graded() -> list[Question]:
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


def chapters() -> list[str]:
    """Chapters with page questions, in order."""
    return sorted({q.chapter for q in questions() if not q.graded})


def page_questions(chapter: str) -> list[Question]:
    """The questions the site shows for ``chapter`` (never a graded one)."""
    out = [q for q in questions() if q.chapter == chapter and not q.graded]
    if not out:
        raise ValueError(f"no page questions for chapter {chapter!r}: use one of "
                         f"{', '.join(chapters())}")
    return out


def graded_questions() -> list[Question]:
    """The graded quiz's questions (``solutions/ex17_quiz.ipynb``), held out of the page."""
    return [q for q in questions() if q.graded]


def letters(q: Question) -> str:
    return LETTERS[: len(q.options)]


def correct_letter(q: Question) -> str:
    return next(LETTERS[i] for i, o in enumerate(q.options) if o.correct)


def question_markdown(q: Question, number: int) -> str:
    """The graded notebook's Markdown for ``q``: stem and lettered options, no key."""
    lines = [f"## Question {number}", "", q.stem, ""]
    lines += [f"* **{LETTERS[i]}**: {o.text}" for i, o in enumerate(q.options)]
    lines += ["", f"Set `answer_q{number}` to one letter."]
    return "\n".join(lines)


MASTER_INTRO = (
    "# Exercise 17: check yourself\n\n"
    "Six multiple-choice questions on the serving chapter (`chapters/17_serving.ipynb`) and the\n"
    "tensor-parallel chapters, one on each topic of the serving lesson's \"Check yourself\". The\n"
    "chapter's page carries its own six questions with explanations to practise on; these are\n"
    "different ones. For each, set the variable to one letter and run the cell below it: "
    "it checks\n"
    "only that you gave a valid letter. The gradebook counts the letter you hand in, one "
    "point per\n"
    "question; your feedback after grading says which were right.")


def sync_master(nb) -> bool:
    """Write the graded questions into the master ``ex17_quiz`` (an nbformat notebook) in place.

    Cells are matched by id (``ex17q-NN``): question Markdown, answer (the key, inside the
    solution block) and a public check that accepts any valid letter. Returns whether anything
    changed. ``python -m tpp.site.quiz`` applies it to ``solutions/ex17_quiz.ipynb``.
    """
    cells = {c.id: c for c in nb.cells}
    new = {"ex17q-00": MASTER_INTRO}
    for n, q in enumerate(graded_questions(), 1):
        base = 2 + 4 * (n - 1)
        new[f"ex17q-{base:02d}"] = question_markdown(q, n)
        new[f"ex17q-{base + 1:02d}"] = (
            f'# BEGIN SOLUTION\nanswer_q{n} = "{correct_letter(q)}"\n# END SOLUTION')
        new[f"ex17q-{base + 2:02d}"] = (
            f'check_defined(globals(), "answer_q{n}")\n'
            f'check_choice("answer_q{n}", answer_q{n}, "{letters(q)}")\n'
            f'print("q{n}: a valid letter, recorded — the gradebook counts your final letter")')
    missing = sorted(set(new) - set(cells))
    if missing:
        raise ValueError(f"the master has no cells {missing}: add them (ids ex17q-NN)")
    changed = False
    for cid, text in new.items():
        if cells[cid].source != text:
            cells[cid].source, changed = text, True
    return changed


_CODE = re.compile(r"`([^`]+)`")


def _inline(text: str) -> str:
    return _CODE.sub(r"<code>\1</code>", html.escape(text, quote=False))


def render_html(chapter: str) -> str:
    """The page's markup: ``.tpp-quiz`` > ``.tpp-question`` > options with ``.tpp-explanation``.

    Works without a kernel: ``_static/quiz/tpp_quiz.js`` reveals an option's explanation on
    click (or Enter/Space) and keeps the running score in ``.tpp-score``.
    """
    qs = page_questions(chapter)
    out = [f'<section class="tpp-quiz" data-chapter="{html.escape(chapter)}" '
           f'aria-label="Check yourself">',
           f'<p class="tpp-score" aria-live="polite">Score <span class="tpp-score-right">0'
           f'</span>/<span class="tpp-score-total">{len(qs)}</span> · answered '
           f'<span class="tpp-score-answered">0</span></p>']
    for n, q in enumerate(qs, 1):
        qid = f"tpp-quiz-{html.escape(q.id)}"
        out.append(f'<fieldset class="tpp-question" id="{qid}">')
        out.append(f'<legend>Question {n} of {len(qs)}: {_inline(q.stem)}</legend>')
        for i, o in enumerate(q.options):
            eid = f"{qid}-{LETTERS[i].lower()}"
            out.append(
                f'<div class="tpp-option"><button type="button" class="tpp-choice" '
                f'data-correct="{str(o.correct).lower()}" aria-expanded="false" '
                f'aria-controls="{eid}"><span class="tpp-letter">{LETTERS[i]}</span> '
                f'{_inline(o.text)}</button>'
                f'<p class="tpp-explanation" id="{eid}" hidden>{_inline(o.explanation)}</p></div>')
        out.append("</fieldset>")
    out.append("</section>")
    return "\n".join(out)


if __name__ == "__main__":   # python -m tpp.site.quiz: regenerate the master's question cells
    from pathlib import Path

    import nbformat

    path = Path(__file__).resolve().parents[2] / "solutions" / "ex17_quiz.ipynb"
    book = nbformat.read(path, as_version=4)
    if sync_master(book):
        nbformat.write(book, path)
        print(f"wrote {path}; now run: tpp assign")
    else:
        print(f"{path} is up to date")
