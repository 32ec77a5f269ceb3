"""Questions of the data-parallel, composition, long-context and expert chapters
(13, 13b, 14, 15, 16) and of the real engine (18)."""

from __future__ import annotations

from fractions import Fraction

from tpp.costs.context_parallel import attention_work_per_rank
from tpp.costs.zero import model_state_bytes
from tpp.hardware import GB

from .question import Question, R, W, _q


def questions() -> list[Question]:
    """Chapters 13-16, in order."""
    qs: list[Question] = []
    add = qs.append

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
    return qs


def engine_questions() -> list[Question]:
    """Chapter 18."""
    qs: list[Question] = []
    add = qs.append

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
    return qs
