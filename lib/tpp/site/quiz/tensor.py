"""Questions of the tensor-parallel chapters (01-06)."""

from __future__ import annotations

from tpp.costs.tp import ring_factor
from tpp.hardware import GB, gbit_per_s, link
from tpp.models import model

from .question import Question, R, W, _frac, _q


def questions() -> list[Question]:
    """Chapters 01-06, in order."""
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
    return qs
