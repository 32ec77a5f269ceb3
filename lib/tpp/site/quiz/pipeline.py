"""Questions of the pipeline chapters (07-12)."""

from __future__ import annotations

from fractions import Fraction

from tpp.symbolic import pipeline as sym_pipeline

from .question import Question, R, W, _pct, _q


def questions() -> list[Question]:
    """Chapters 07-12, in order."""
    qs: list[Question] = []
    add = qs.append

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
    return qs
