"""Rank-consistent sampling: a tiny tensor-parallel language model on the simulated group.

Under tensor parallelism every rank ends a decode step with the logits of the whole vocabulary
and must append the *same* token to its KV cache; if two ranks pick different tokens, the next
all-reduce sums partial results computed on different inputs, and from then on no rank runs the
model any more (the serving lesson, "every rank must sample the same token"). This module lets
one measure what makes ranks disagree:

* ``allreduce="ring"``: :meth:`tpp.collectives.ProcessGroup.all_reduce`. Its all-gather phase
  copies the same reduced chunks to every rank, so the ranks' logits are bitwise equal.
* ``allreduce="own_order"``: :func:`one_shot_all_reduce`, where every rank receives all partial
  sums and adds them starting from its own (the order differs per rank; floating-point addition
  is commutative but not associative, so results differ from three ranks on).
* ``rng="same"`` (every rank's generator seeded alike) or ``rng="per_rank"`` (seed + rank).
* ``sampler="independent"`` (every rank samples) or ``sampler="rank0_broadcast"`` (rank 0 samples
  and :meth:`~tpp.collectives.ProcessGroup.broadcast` sends the token ids: the fix).

Sampling is inverse-CDF sampling of ``softmax(logits / temperature)`` with one uniform draw per
sequence and step, in the working dtype (float32 by default). The chance that a given draw picks
different tokens on two ranks is the measure of the draws on which their inverse CDFs disagree,
``1 - sum_j |I_a(j) & I_b(j)|`` with ``I(j)`` token j's interval of the CDF
(:func:`flip_probability`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tpp.collectives import CollectiveRecord, ProcessGroup
from tpp.hardware import cpu_count
from tpp.serving.inputs import check_choice, check_positive_ints
from tpp.tensor_parallel.activations import gelu

__all__ = ["TinyLM", "init_tiny_lm", "one_shot_all_reduce", "sample_tokens", "flip_probability",
           "Generation", "generate", "generate_settings", "tokens_until_divergence",
           "round_bfloat16", "ALLREDUCES",
           "RNGS", "SAMPLERS", "PRECISIONS"]

ALLREDUCES = ("ring", "own_order")
RNGS = ("same", "per_rank")
SAMPLERS = ("independent", "rank0_broadcast")


@dataclass(frozen=True)
class TinyLM:
    """A pre-norm decoder (RMSNorm, multi-head attention, GELU MLP), weights in ``dtype``.

    ``layers[i]`` holds ``wq, wk, wv, wo`` (d x d; head h owns columns/rows
    ``h*d_head:(h+1)*d_head``) and ``w1`` (d x d_ff), ``w2`` (d_ff x d). The embedding is tied to
    the LM head (``logits = rmsnorm(x) @ embed.T * logit_scale``), replicated on every rank;
    ``logit_scale`` sets how peaked the next-token distribution is.
    """

    embed: np.ndarray
    layers: tuple[dict, ...]
    n_heads: int
    logit_scale: float = 0.5

    @property
    def vocab(self) -> int:
        return self.embed.shape[0]

    @property
    def d_model(self) -> int:
        return self.embed.shape[1]

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def dtype(self) -> np.dtype:
        return self.embed.dtype


def init_tiny_lm(vocab: int = 64, d_model: int = 32, n_heads: int = 8, n_layers: int = 2,
                 d_ff: int = 128, seed: int = 0, dtype: str = "float32") -> TinyLM:
    """Random weights (normal, scaled by 1/sqrt(fan-in)) for a :class:`TinyLM`."""
    check_positive_ints(vocab=vocab, d_model=d_model, n_heads=n_heads, n_layers=n_layers,
                        d_ff=d_ff)
    if d_model % n_heads:
        raise ValueError(f"n_heads={n_heads} must divide d_model={d_model}")
    dt = np.dtype(dtype)
    if dt.kind != "f":
        raise ValueError(f"dtype={dtype!r} must be a float dtype, e.g. 'float32'")
    rng = np.random.default_rng(seed)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(dt)

    layers = tuple(dict(wq=w(d_model, d_model), wk=w(d_model, d_model), wv=w(d_model, d_model),
                        wo=w(d_model, d_model), w1=w(d_model, d_ff), w2=w(d_ff, d_model))
                   for _ in range(n_layers))
    embed = rng.standard_normal((vocab, d_model)).astype(dt)
    return TinyLM(embed=embed, layers=layers, n_heads=n_heads)


def _rmsnorm(x: np.ndarray) -> np.ndarray:
    return (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6)).astype(x.dtype)


PRECISIONS = ("float32", "bfloat16")


def round_bfloat16(x: np.ndarray) -> np.ndarray:
    """Round float32 values to the nearest bfloat16 (ties to even), kept in a float32 array:
    what a bf16 all-reduce buffer holds (8 bits of mantissa instead of 24)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    bits = x.view(np.uint32)
    # in uint32: a sum that wraps past 2**32 (only NaNs' bit patterns) keeps the same bits 16-31
    # as in wider integers, and the mask keeps only those (the same result, half the work)
    out = (bits >> 16) & 1
    out += 0x7FFF
    out += bits
    out &= 0xFFFF0000
    return out.view(np.float32).reshape(x.shape)


def one_shot_all_reduce(group: ProcessGroup, arrays: list[np.ndarray], *,
                        tag: str = "", precision: str = "float32") -> list[np.ndarray]:
    """All-reduce (sum) in which every rank receives every partial and adds them in its own order.

    Rank ``r`` computes ``x_r + x_{r+1} + ... + x_{r-1}`` (left to right, indices mod n): the
    one-shot algorithm serving stacks use for small messages (each rank sends its whole array to
    the n-1 others in one step), with an order that starts from the rank's own shard. Recorded in
    ``group.ledger`` as an ``all_reduce`` with ``algorithm="one_shot"``, 1 step and
    ``(n-1) * M`` bytes sent per rank. ``precision="bfloat16"`` rounds the partials and every
    running sum to bfloat16, as a bf16 communication buffer would.
    """
    check_choice("precision", precision, PRECISIONS)
    rnd = round_bfloat16 if precision == "bfloat16" else (lambda a: a)
    n = group.size
    if len(arrays) != n:
        raise ValueError(f"one_shot_all_reduce got {len(arrays)} arrays for a group of size {n}: "
                         "pass one array per rank")
    arrs = [np.asarray(a) for a in arrays]
    if any(a.shape != arrs[0].shape or a.dtype != arrs[0].dtype for a in arrs):
        raise ValueError("one_shot_all_reduce: every rank must pass the same shape and dtype")
    out = []
    for r in range(n):
        acc = rnd(arrs[r].copy())
        for k in range(1, n):
            acc = rnd(acc + rnd(arrs[(r + k) % n]))
        out.append(acc)
    m = arrs[0].nbytes
    group.ledger.append(CollectiveRecord(
        op="all_reduce", group_size=n, payload_bytes=m,
        bytes_sent_per_rank=tuple([(n - 1) * m] * n), steps=1 if n > 1 else 0,
        algorithm="one_shot" if n > 1 else "none", tag=tag))
    return out


def _probs(logits: np.ndarray, temperature: float) -> np.ndarray:
    z = logits / logits.dtype.type(temperature)
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def sample_tokens(logits: np.ndarray, u: np.ndarray, temperature: float) -> np.ndarray:
    """Inverse-CDF sampling: token ``k`` of row ``i`` such that ``F(k-1) <= u_i < F(k)``.

    ``logits`` has shape (batch, vocab), ``u`` shape (batch,) with draws in [0, 1).
    ``temperature=0`` is greedy decoding (argmax; ``u`` ignored). Arithmetic in logits' dtype.
    """
    if temperature < 0:
        raise ValueError(f"temperature={temperature} must be >= 0 (0 = greedy)")
    if temperature == 0:
        return np.argmax(logits, axis=-1)
    cdf = np.cumsum(_probs(logits, temperature), axis=-1)
    target = (u.astype(logits.dtype) * cdf[:, -1])[:, None]
    idx = (cdf <= target).sum(axis=-1)
    return np.minimum(idx, logits.shape[-1] - 1)


def flip_probability(logits: list[np.ndarray], temperature: float) -> np.ndarray:
    """Per row, the probability over one uniform draw ``u`` that ranks sampling with that *same*
    draw do not all pick the same token.

    Rank r picks token j when ``u`` falls in ``I_r(j) = [F_r(j-1), F_r(j))`` (its normalised CDF
    in the working dtype, as :func:`sample_tokens` compares it). All ranks agree exactly when
    ``u`` lies in ``I_0(j) & I_1(j) & ...`` for some j, so the flip probability is
    ``1 - sum_j |intersection_r I_r(j)|`` (about ``sum_k |F_a(k) - F_b(k)|`` for tiny gaps).
    """
    if temperature <= 0:
        raise ValueError("flip_probability needs temperature > 0 (greedy flips only on exact ties)")
    cdfs = []
    for lg in logits:
        c = np.cumsum(_probs(lg, temperature), axis=-1).astype(np.float64)
        c = c / c[:, -1:]
        cdfs.append(np.concatenate([np.zeros((c.shape[0], 1)), c], axis=1))
    lo = np.max([c[:, :-1] for c in cdfs], axis=0)
    hi = np.min([c[:, 1:] for c in cdfs], axis=0)
    own = cdfs[0][:, 1:] - cdfs[0][:, :-1]  # rank 0's intervals (sum to 1)
    return np.clip((own - np.clip(hi - lo, 0.0, None)).sum(axis=-1), 0.0, 1.0)


@dataclass
class Generation:
    """What :func:`generate` observed. ``tokens[r]`` is rank r's (batch, n_tokens) sequence."""

    tokens: np.ndarray
    logits_equal_steps: int
    steps: int
    max_logit_diff: float
    flip_probability: np.ndarray  # (n_tokens, batch); NaN once a sequence has diverged
    group: ProcessGroup
    settings: dict = field(default_factory=dict)

    def divergence_step(self) -> np.ndarray:
        """Per sequence, the first generated position where some rank's token differs from rank
        0's, or -1 if the ranks agree on the whole sequence."""
        differs = (self.tokens != self.tokens[0:1]).any(axis=0)  # (batch, n_tokens)
        first = np.argmax(differs, axis=1)
        return np.where(differs.any(axis=1), first, -1)


def generate(model: TinyLM, tp: int, prompts: np.ndarray, n_tokens: int, *,
             temperature: float = 1.0, seed: int = 0, allreduce: str = "ring",
             rng: str = "same", sampler: str = "independent",
             comm_precision: str = "float32") -> Generation:
    """Generate ``n_tokens`` per prompt with ``model`` sharded over ``tp`` simulated ranks.

    Rank r holds attention heads ``r*H/tp ... (r+1)*H/tp - 1`` (columns of ``wq, wk, wv``, rows of
    ``wo``: Megatron's column- then row-parallel pair) with their KV cache, and columns
    ``r*d_ff/tp ...`` of ``w1`` / rows of ``w2``; each sublayer ends with one all-reduce. Each rank
    keeps its *own* copy of the generated tokens and feeds them back, so a disagreement
    propagates exactly as it would on real ranks. ``prompts``: int array (batch, prompt_len).
    ``sampler`` may also be a function ``(group, logits, draws, temperature) -> tokens``
    receiving one (batch, vocab) logits array and one (batch,) array of uniform draws per rank
    and returning one (batch,) array of token ids per rank.
    ``comm_precision="bfloat16"``: the all-reduces carry bf16 (partials rounded before the ring;
    every running sum rounded in the own-order sum); the model itself computes in float32.
    """
    check_choice("comm_precision", comm_precision, PRECISIONS)
    check_choice("allreduce", allreduce, ALLREDUCES)
    check_choice("rng", rng, RNGS)
    if not callable(sampler):
        check_choice("sampler", sampler, SAMPLERS)
    h, dh = model.n_heads, model.d_head
    d_ff = model.layers[0]["w1"].shape[1]
    check_positive_ints(tp=tp)
    if h % tp or d_ff % tp:
        raise ValueError(f"tp={tp} must divide n_heads={h} and d_ff={d_ff}: pick a divisor")
    prompts = np.asarray(prompts)
    if prompts.ndim != 2 or prompts.shape[1] < 1:
        raise ValueError("prompts must be an int array of shape (batch, prompt_len >= 1)")
    check_positive_ints(n_tokens=n_tokens)
    group = ProcessGroup(tp, name="tp")
    dt = model.dtype
    batch, plen = prompts.shape
    hpr, fpr = h // tp, d_ff // tp
    cols = [slice(r * hpr * dh, (r + 1) * hpr * dh) for r in range(tp)]
    ffc = [slice(r * fpr, (r + 1) * fpr) for r in range(tp)]
    gens = [np.random.default_rng(seed + (r if rng == "per_rank" else 0)) for r in range(tp)]
    # per rank, per layer: K and V caches of this rank's heads, (batch, heads, t, d_head), each
    # allocated once for every position to come and filled one position per step (the attention
    # reads the first t positions: the same values in the same layout as a cache grown by
    # concatenation, without copying it at every step)
    t_max = plen - 1 + n_tokens
    kcache = [[np.zeros((batch, hpr, t_max, dh), dt) for _ in model.layers] for _ in range(tp)]
    vcache = [[np.zeros((batch, hpr, t_max, dh), dt) for _ in model.layers] for _ in range(tp)]
    filled = [0]  # positions held in the caches
    seqs = [prompts.copy() for _ in range(tp)]
    if comm_precision == "bfloat16" and model.dtype != np.float32:
        raise ValueError("comm_precision='bfloat16' needs a float32 model")

    def reduce(xs: list[np.ndarray], tag: str) -> list[np.ndarray]:
        if allreduce == "own_order":
            return one_shot_all_reduce(group, xs, tag=tag, precision=comm_precision)
        if comm_precision == "bfloat16":
            return [round_bfloat16(y) for y in group.all_reduce([round_bfloat16(x) for x in xs],
                                                                tag=tag)]
        return group.all_reduce(xs, tag=tag)

    scale = dt.type(1.0 / np.sqrt(dh))
    # each rank's own shards, contiguous (what rank r holds in its memory)
    shards = [[dict(wq=np.ascontiguousarray(lw["wq"][:, cols[r]]),
                    wk=np.ascontiguousarray(lw["wk"][:, cols[r]]),
                    wv=np.ascontiguousarray(lw["wv"][:, cols[r]]),
                    wo=np.ascontiguousarray(lw["wo"][cols[r], :]),
                    w1=np.ascontiguousarray(lw["w1"][:, ffc[r]]),
                    w2=np.ascontiguousarray(lw["w2"][ffc[r], :])) for lw in model.layers]
              for r in range(tp)]
    head = np.ascontiguousarray(model.embed.T * dt.type(model.logit_scale))

    def step(inputs: list[np.ndarray]) -> list[np.ndarray]:
        """One position for every rank: rank r's input tokens (batch,) -> its logits."""
        xs = [model.embed[t] for t in inputs]
        t = filled[0]
        for li in range(len(model.layers)):
            parts = []
            for r in range(tp):
                sh = shards[r][li]
                a = _rmsnorm(xs[r])
                q, k, v = (a @ sh[w] for w in ("wq", "wk", "wv"))
                split = (batch, hpr, 1, dh)
                kcache[r][li][:, :, t:t + 1] = k.reshape(split)
                vcache[r][li][:, :, t:t + 1] = v.reshape(split)
                keys, values = kcache[r][li][:, :, :t + 1], vcache[r][li][:, :, :t + 1]
                s = (q.reshape(split) @ keys.transpose(0, 1, 3, 2)) * scale
                p = np.exp(s - s.max(axis=-1, keepdims=True))
                p = p / p.sum(axis=-1, keepdims=True)
                o = (p @ values).reshape(batch, hpr * dh)
                parts.append(o @ sh["wo"])
            att = reduce(parts, tag=f"layer{li}.attn")
            xs = [xs[r] + att[r] for r in range(tp)]
            parts = [gelu(_rmsnorm(xs[r]) @ shards[r][li]["w1"]).astype(dt)
                     @ shards[r][li]["w2"] for r in range(tp)]
            mlp = reduce(parts, tag=f"layer{li}.mlp")
            xs = [xs[r] + mlp[r] for r in range(tp)]
        filled[0] = t + 1
        return [_rmsnorm(x) @ head for x in xs]

    for pos in range(plen - 1):  # prefill, one position at a time (the cache fills up)
        step([prompts[:, pos]] * tp)
    equal = 0
    max_diff = 0.0
    flips = np.zeros((n_tokens, batch))
    for i in range(n_tokens):
        logits = step([s[:, -1] for s in seqs])
        bitwise_equal = all(np.array_equal(lg, logits[0]) for lg in logits[1:])
        equal += bitwise_equal
        max_diff = max(max_diff, max(float(np.abs(lg - logits[0]).max()) for lg in logits))
        if temperature > 0 and tp > 1:  # only while the ranks still hold the same sequence
            same = np.all([(s == seqs[0]).all(axis=1) for s in seqs], axis=0)
            # equal logits give equal CDFs, whose intervals coincide: flip_probability is 0.0
            # exactly then (own - (hi - lo) subtracts the same numbers), so it is not computed
            flip = 0.0 if bitwise_equal else flip_probability(logits, temperature)
            flips[i] = np.where(same, flip, np.nan)
        us = [g.random(batch) for g in gens]
        if callable(sampler):
            toks = list(sampler(group, logits, us, temperature))
            if len(toks) != tp:
                raise ValueError(f"the sampler returned {len(toks)} token arrays for {tp} ranks: "
                                 "return one array of token ids per rank")
            toks = [np.asarray(t_, dtype=np.int64).reshape(batch) for t_ in toks]
        elif sampler == "independent":
            toks = [sample_tokens(logits[r], us[r], temperature) for r in range(tp)]
        else:
            tok0 = sample_tokens(logits[0], us[0], temperature).astype(np.int64)
            toks = group.broadcast([tok0] + [None] * (tp - 1), root=0, tag="sample.broadcast")
        seqs = [np.concatenate([seqs[r], toks[r][:, None]], axis=1) for r in range(tp)]
    tokens = np.stack([s[:, plen:] for s in seqs])
    return Generation(tokens=tokens, logits_equal_steps=equal, steps=n_tokens,
                      max_logit_diff=max_diff, flip_probability=flips, group=group,
                      settings=dict(tp=tp, temperature=temperature, seed=seed,
                                    allreduce=allreduce, rng=rng,
                                    sampler=sampler if isinstance(sampler, str) else "custom",
                                    dtype=str(dt), comm_precision=comm_precision))


def _generate_kw(args: tuple) -> Generation:
    model, tp, prompts, n_tokens, kw = args
    return generate(model, tp, prompts, n_tokens, **kw)


def generate_settings(model: TinyLM, tp: int, prompts: np.ndarray, n_tokens: int,
                      settings: dict[str, dict], *, processes: int | None = None
                      ) -> dict[str, Generation]:
    """:func:`generate` once per named setting (``{name: keyword arguments}``), the settings
    side by side in ``processes`` worker processes (default: as many as settings, at most the
    CPUs this process may use; 1 = one after another, here).

    Each generation is seeded and independent of the others, and a worker runs the same NumPy
    code, so the results are those of calling :func:`generate` one setting after another
    (bit for bit, with the same BLAS threads: tests/test_sampling.py). A ``sampler`` must be a
    name here (a function defined in a notebook cannot be sent to a worker)."""
    if any(callable(kw.get("sampler")) for kw in settings.values()):
        raise ValueError("generate_settings sends each setting to a worker process: pass "
                         "sampler by name, or call generate() for a custom sampler function")
    cpus = cpu_count()
    if processes is not None:
        check_positive_ints(processes=processes)
    n = min(len(settings), cpus) if processes is None else processes
    jobs = [(model, tp, prompts, n_tokens, kw) for kw in settings.values()]
    if n <= 1 or len(jobs) <= 1:
        return {name: _generate_kw(job) for name, job in zip(settings, jobs, strict=True)}
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    # spawn: a fresh interpreter (a notebook kernel's threads are not forked)
    with ProcessPoolExecutor(max_workers=n, mp_context=get_context("spawn")) as pool:
        return dict(zip(settings, pool.map(_generate_kw, jobs), strict=True))


def tokens_until_divergence(gen: Generation) -> np.ndarray:
    """Per sequence, the number of tokens generated identically on every rank before the first
    disagreement (``n_tokens`` if the ranks never disagree)."""
    first = gen.divergence_step()
    return np.where(first < 0, gen.steps, first)
