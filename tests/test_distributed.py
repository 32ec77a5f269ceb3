"""The same per-rank programs on a real engine (torch.distributed, gloo, CPU processes).

One World of 4 processes runs every program once (module fixture: spawning costs seconds);
the tests compare its results with the simulator (same programs on simulated ranks), with the
unsharded references, with PyTorch's own tensor parallelism (parallelize_module) and pipelining,
and the bytes handed to torch.distributed with the simulated ledger's payloads.
"""

from __future__ import annotations

import numpy as np
import pytest
from tpp import pipeline
from tpp.collectives import ProcessGroup, spmd
from tpp.tensor_parallel import (
    MLP,
    Attention,
    ShardedAttention,
    init_attention_weights,
    shard_columns,
    shard_rows,
    split_sequence,
)
from tpp.tensor_parallel.layernorm import layernorm_backward, layernorm_forward

# all tests of this module share one World: make test keeps each file on one xdist worker
# (--dist loadfile), so the processes are started once (the group serves --dist loadgroup, where
# pytest honours it)
pytestmark = pytest.mark.xdist_group("torch_engine")

P = 4
TOL = 1e-12


def rel(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


def _mlp_case(act: str, rng):
    d, d_ff, n = 8, 16, 8
    w = {"w1": rng.standard_normal((d, d_ff)), "w2": rng.standard_normal((d_ff, d)),
         "w3": rng.standard_normal((d, d_ff)) if act == "swiglu" else None}
    x, dy = rng.standard_normal((n, d)), rng.standard_normal((n, d))
    w1s, w2s = shard_columns(w["w1"], P), shard_rows(w["w2"], P)
    w3s = shard_columns(w["w3"], P) if w["w3"] is not None else [None] * P
    return w, x, dy, [(x, w1s[r], w2s[r], w3s[r], dy) for r in range(P)]


ATTN_CASES = {"gqa": (8, 4, False), "gqa-replicated-kv": (8, 2, True)}


@pytest.fixture(scope="module")
def engine(torch):
    from tpp.distributed import World, programs

    rng = np.random.default_rng(2026)
    out: dict = {"mlp": {}, "ctrl": {}, "attn": {}, "pp": {}}
    jobs = []                                    # (key, program, per-rank args, simulate?)
    for act in ("gelu", "swiglu"):
        w, x, dy, args = _mlp_case(act, rng)
        out["mlp"][act] = {"w": w, "x": x, "dy": dy}
        jobs.append((("mlp", act), programs.tp_mlp_step, args))
    w, x, dy, args = _mlp_case("gelu", rng)
    for v in ("no f", "all-reduce both ways"):
        out["ctrl"][v] = {"w": w, "x": x, "dy": dy}
        jobs.append((("ctrl", v), programs.tp_mlp_step, [a + (v,) for a in args]))
    for name, (nh, nkv, rep) in ATTN_CASES.items():
        wa = init_attention_weights(16, nh, nkv, seed=5)
        x3, dy3 = rng.standard_normal((6, 2, 16)), rng.standard_normal((6, 2, 16))
        layer = ShardedAttention(**wa, tp=P, n_heads=nh, n_kv_heads=nkv, replicate_kv=rep)
        R = layer.split.replicas
        out["attn"][name] = {"w": wa, "x": x3, "dy": dy3, "layer": layer}
        jobs.append((("attn", name), programs.tp_attention_step,
                     [(x3, layer.ranks[r], None, dy3, R) for r in range(P)]))
    gl = {"ln_g": 1 + 0.1 * rng.standard_normal(8), "ln_b": 0.1 * rng.standard_normal(8)}
    mw, mx, mdy = out["mlp"]["gelu"]["w"], out["mlp"]["gelu"]["x"], out["mlp"]["gelu"]["dy"]
    xs, dys = split_sequence(mx, P), split_sequence(mdy, P)
    w1s, w2s = shard_columns(mw["w1"], P), shard_rows(mw["w2"], P)
    out["sp"] = {**gl}
    jobs.append((("sp", "ours"), programs.sp_norm_mlp_step,
                 [(xs[r], gl["ln_g"], gl["ln_b"], w1s[r], w2s[r], dys[r]) for r in range(P)]))
    jobs.append((("sp", "torch"), programs.torch_tp_mlp_step,
                 [(xs[r], mw["w1"], mw["w2"], dys[r], gl["ln_g"], gl["ln_b"]) for r in range(P)]))
    jobs.append((("torch_tp", "gelu"), programs.torch_tp_mlp_step,
                 [(mx, mw["w1"], mw["w2"], mdy)] * P))
    pw = [rng.standard_normal((4, 4)) / 2 for _ in range(2 * P)]
    px, pt = rng.standard_normal((8, 4)), rng.standard_normal((8, 4))
    out["pp_inputs"] = (pw, px, pt)
    for sch in ("gpipe", "1f1b"):
        jobs.append((("pp", sch), programs.pipeline_step, [(pw, px, pt, 4, sch)] * P))
    with World(P, timeout=180) as world:
        for key, fn, args in jobs:
            out.setdefault("real", {})[key] = world.run(fn, args)
        # last: a layer count the world size does not divide (the world closes on the error)
        procs = list(world._procs)
        try:
            world.run(programs.pipeline_step, [(pw[:6], px, pt, 4)] * P)
        except RuntimeError as exc:
            out["divide_error"] = (str(exc), world.alive, [p.is_alive() for p in procs])
    # the same programs on simulated ranks (not the torch-only ones)
    for key, fn, args in jobs:
        if key[0] in ("mlp", "ctrl", "attn") or key == ("sp", "ours"):
            group = ProcessGroup(P)
            out.setdefault("sim", {})[key] = (spmd(fn, P, args, group=group), group)
    return out


# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("act", ["gelu", "swiglu"])
def test_mlp_on_gloo_equals_the_simulator_and_the_reference(engine, act):
    real, (sim, group) = engine["real"][("mlp", act)], engine["sim"][("mlp", act)]
    c = engine["mlp"][act]
    ref = MLP(c["w"]["w1"], c["w"]["w2"], activation=act, w3=c["w"]["w3"])
    y_ref, dx_ref = ref.forward(c["x"]), ref.backward(c["dy"])
    keys = ["w1", "w2"] + (["w3"] if act == "swiglu" else [])
    for r in range(P):
        assert rel(real[r]["y"], sim[r]["y"]) <= TOL and rel(real[r]["y"], y_ref) <= TOL
        assert rel(real[r]["dx"], sim[r]["dx"]) <= TOL and rel(real[r]["dx"], dx_ref) <= TOL
        for k in keys:
            assert rel(real[r]["grads"][k], sim[r]["grads"][k]) <= TOL
    for k in keys:
        full = np.concatenate([real[r]["grads"][k] for r in range(P)], axis=0 if k == "w2" else 1)
        assert rel(full, ref.grads[k]) <= TOL
    # bytes: what torch.distributed was handed == the simulated ledger's payloads
    ledger = [(rec.op, rec.tag, rec.payload_bytes) for rec in group.ledger]
    assert ledger == [("all_reduce", "g.forward", c["x"].nbytes),
                      ("all_reduce", "f.backward", c["x"].nbytes)]
    for r in range(P):
        assert real[r]["observed"] == ledger


def test_negative_controls_reproduce_on_real_processes(engine):
    c = engine["ctrl"]["no f"]
    ref = MLP(c["w"]["w1"], c["w"]["w2"])
    ref.forward(c["x"])
    dx_ref = ref.backward(c["dy"])
    nof = engine["real"][("ctrl", "no f")]
    sim_nof = engine["sim"][("ctrl", "no f")][0]
    for r in range(P):
        np.testing.assert_array_equal(nof[r]["dx"], nof[r]["dx_partial"])   # nothing summed
        assert rel(nof[r]["dx"], sim_nof[r]["dx"]) <= TOL
        assert rel(nof[r]["dx"], dx_ref) > 0.1                            # wrong, per rank
        assert rel(nof[r]["y"], ref.forward(c["x"])) <= TOL                # forward still right
    assert rel(sum(o["dx"] for o in nof), dx_ref) <= TOL
    both = engine["real"][("ctrl", "all-reduce both ways")]
    for r in range(P):
        assert rel(both[r]["dx"], P * dx_ref) <= TOL
        assert rel(both[r]["grads"]["w2"], P * np.split(ref.grads["w2"], P, axis=0)[r]) <= TOL
    assert [o[1] for o in both[0]["observed"]] == ["g.forward", "g.backward (wrong)",
                                                   "f.backward"]


@pytest.mark.parametrize("name", list(ATTN_CASES))
def test_attention_gqa_on_gloo_equals_the_simulator_and_the_reference(engine, name):
    nh, nkv, _ = ATTN_CASES[name]
    c = engine["attn"][name]
    real, (sim, group) = engine["real"][("attn", name)], engine["sim"][("attn", name)]
    ref = Attention(**c["w"], n_heads=nh, n_kv_heads=nkv)
    y_ref, dx_ref = ref.forward(c["x"]), ref.backward(c["dy"])
    layer = c["layer"]
    y_wrap = layer.forward(c["x"])
    dx_wrap = layer.backward(c["dy"])
    R = layer.split.replicas
    for r in range(P):
        for k in ("y", "dx"):
            assert rel(real[r][k], sim[r][k]) <= TOL
        assert rel(real[r]["y"], y_ref) <= TOL and rel(real[r]["dx"], dx_ref) <= TOL
        np.testing.assert_array_equal(sim[r]["y"], y_wrap)
        np.testing.assert_array_equal(sim[r]["dx"], dx_wrap)
        for k in ("wq", "wk", "wv", "wo"):
            assert rel(real[r]["grads"][k], layer.shard_grads[k][r]) <= TOL
    assert rel(np.concatenate([real[r]["grads"]["wk"] for r in range(0, P, R)], axis=1),
               ref.grads["wk"]) <= TOL
    ledger = [(rec.op, rec.tag, rec.payload_bytes) for rec in group.ledger]
    assert real[0]["observed"] == ledger     # subgroup (KV replica) calls are on their own comm
    assert [t for _, t, _ in ledger] == ["g.forward", "f.backward"]


def test_parallelize_module_equals_our_mlp_and_issues_our_ledger(engine):
    c = engine["mlp"]["gelu"]
    torch_tp = engine["real"][("torch_tp", "gelu")]
    ours = engine["real"][("mlp", "gelu")]
    ledger = [(rec.op, rec.payload_bytes) for rec in engine["sim"][("mlp", "gelu")][1].ledger]
    for r in range(P):
        assert rel(torch_tp[r]["y"], ours[r]["y"]) <= TOL
        assert rel(torch_tp[r]["dx"], ours[r]["dx"]) <= TOL
        for k in ("w1", "w2"):
            full = np.concatenate([o["grads"][k] for o in ours], axis=0 if k == "w2" else 1)
            assert rel(torch_tp[r]["grads"][k], full) <= TOL
        # PyTorch issues exactly our f and g: one all-reduce each way, same bytes
        assert torch_tp[r]["forward"] == ledger[:1]
        assert torch_tp[r]["backward"] == ledger[1:]
    assert ledger == [("all_reduce", c["x"].nbytes)] * 2


def test_sequence_parallel_norm_equals_ours_and_the_reference(engine):
    c, sp = engine["mlp"]["gelu"], engine["sp"]
    ours, theirs = engine["real"][("sp", "ours")], engine["real"][("sp", "torch")]
    sim, group = engine["sim"][("sp", "ours")]
    # reference: LayerNorm then MLP on one process
    a = layernorm_forward(c["x"], sp["ln_g"], sp["ln_b"], 1e-5)
    ref = MLP(c["w"]["w1"], c["w"]["w2"])
    y_ref = ref.forward(a)
    dx_ref, dg_ref, db_ref = layernorm_backward(c["x"], sp["ln_g"], ref.backward(c["dy"]), 1e-5)
    assert rel(np.concatenate([o["y"] for o in theirs]), y_ref) <= TOL
    assert rel(np.concatenate([o["dx"] for o in theirs]), dx_ref) <= TOL
    for r in range(P):
        for k in ("y", "dx"):
            assert rel(ours[r][k], theirs[r][k]) <= TOL and rel(ours[r][k], sim[r][k]) <= TOL
        assert rel(theirs[r]["grads"]["ln_g"], dg_ref) <= TOL
        assert rel(ours[r]["grads"]["ln_b"], db_ref) <= TOL
        assert rel(theirs[r]["grads"]["w1"],
                   np.concatenate([o["grads"]["w1"] for o in ours], axis=1)) <= TOL
    ledger = [(rec.op, rec.payload_bytes) for rec in group.ledger]
    assert [rec.op for rec in group.ledger] == ["all_gather", "reduce_scatter", "all_gather",
                                                "reduce_scatter", "all_reduce", "all_reduce"]
    assert ours[0]["observed"] == [(rec.op, rec.tag, rec.payload_bytes) for rec in group.ledger]
    # PyTorch: the same all-gather / reduce-scatter pairs in forward and backward; the norm's
    # weight-gradient all-reduces are deferred until the gradient is read (Partial -> Replicate)
    assert theirs[0]["forward"] == ledger[0:2]
    assert theirs[0]["backward"] == ledger[2:4]
    assert [x for x in theirs[0]["assemble"] if x[0] == "all_reduce"] == ledger[4:6]


@pytest.mark.parametrize("sched", ["gpipe", "1f1b"])
def test_pipelining_equals_one_process_and_follows_our_schedule(engine, sched):
    from tpp.distributed.programs import pipeline_reference

    pw, px, pt = engine["pp_inputs"]
    real = engine["real"][("pp", sched)]
    ref = pipeline_reference(pw, px, pt)
    assert abs(np.mean(real[-1]["losses"]) - ref["loss"]) <= TOL * abs(ref["loss"])
    grads = [g for r in range(P) for g in real[r]["grads"]]
    for g, g_ref in zip(grads, ref["grads"], strict=True):
        assert rel(g, g_ref) <= TOL
    ours = pipeline.schedule(sched, ranks=P, microbatches=4)
    for r in range(P):
        assert real[r]["order"] == [f"{a.kind}{a.microbatch}" for a in ours.actions[r]]


# --------------------------------------------------------------------------------------------
def test_a_failing_rank_is_reported_and_every_process_reaped(torch):
    from tpp.distributed import World, programs

    rng = np.random.default_rng(0)
    w1, w2 = rng.standard_normal((4, 8)), rng.standard_normal((8, 4))
    x = rng.standard_normal((3, 4))
    w1s, w2s = shard_columns(w1, 2), shard_rows(w2, 2)
    bad = w1s[1][:, :3]                 # rank 1 breaks; rank 0 waits in g's all-reduce
    world = World(2, timeout=60)
    world.start()
    procs = list(world._procs)
    with pytest.raises(RuntimeError, match="rank 1 failed while running tp_mlp_step"):
        world.run(programs.tp_mlp_step, [(x, w1s[0], w2s[0], None, x), (x, bad, w2s[1], None, x)])
    assert world.alive == [] and not any(p.is_alive() for p in procs)


def test_a_world_size_that_does_not_divide_is_a_clear_error(engine):
    msg, alive, procs_alive = engine["divide_error"]
    assert "6 layers do not split evenly over 4 stages: use a multiple of 4 layers" in msg
    assert alive == [] and procs_alive == [False] * P
    with pytest.raises(ValueError, match="d_ff=16 is not divisible by TP=3"):
        shard_columns(engine["mlp"]["gelu"]["w"]["w1"], 3)


def test_bad_world_arguments(torch):
    from tpp.distributed import World

    with pytest.raises(ValueError, match="size=0 must be a positive integer"):
        World(0)
    with pytest.raises(ValueError, match="backend='mpi': use 'gloo'"):
        World(2, backend="mpi")
    with pytest.raises(ValueError, match="start the World first"):
        World(2).run(print)
