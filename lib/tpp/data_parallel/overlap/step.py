"""One rank's training step as a two-stream timeline: :func:`step_timeline`.

The compute stream runs, per microbatch, the forward of layers ``0 .. L-1`` then their backward
``L-1 .. 0`` (or the order a pipeline schedule gives, :func:`rank_schedule`). The communication
of each kind is placed where the systems place it (see :mod:`tpp.data_parallel.overlap.traffic`):
DP gradient buckets behind the backward, FSDP gathers ``prefetch`` layers ahead, the distributed
optimizer's parameter gathers behind the next step's forward, TP collectives inside each layer
(blocking unless decomposed), CP's ring behind the attention, PP's sends after each microbatch.
:func:`tpp.data_parallel.overlap.timeline.run` then runs the streams, with links shared by name
and compute slowed while a collective runs.

``overlap=False`` chains every op after the one before it (one stream, nothing concurrent):
the step is then exactly the sum of all compute and all communication.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from numbers import Real

from tpp.data_parallel.overlap.contention import NCCL_SM_SLOWDOWN
from tpp.data_parallel.overlap.timeline import COMPUTE, Event, Op, Run, run
from tpp.data_parallel.overlap.traffic import CPTraffic, DPTraffic, PPTraffic, TPTraffic

__all__ = ["KINDS", "StepTimeline", "step_timeline", "rank_schedule"]

#: Kinds of communication, the keys of :attr:`StepTimeline.exposed`.
KINDS = ("tp", "cp", "pp", "dp_grad", "dp_param")


@dataclass
class StepTimeline:
    """What :func:`step_timeline` returns. Seconds throughout.

    ``step_time`` = ``compute`` + sum of ``exposed`` + ``contention`` + ``idle``:

    * ``compute``: all compute at full speed (layers, optimizer step);
    * ``exposed[kind]``: time the compute stream waited while communication of ``kind`` ran
      (one key per kind in :data:`KINDS`, 0 when absent or hidden);
    * ``contention``: extra compute time from NCCL kernels holding SMs during overlap;
    * ``idle``: waiting with no communication running (pipeline releases: the bubble);
    * ``comm[kind]``: total communication time of ``kind`` (hidden or not);
    * ``link_busy[link]``: busy seconds of each link (the busiest bounds the step);
    * ``events``: every op's start and end (:class:`tpp.data_parallel.overlap.timeline.Event`),
      for plots.
    """

    step_time: float
    compute: float
    exposed: dict[str, float]
    contention: float
    idle: float
    comm: dict[str, float]
    link_busy: dict[str, float]
    events: list[Event] = field(repr=False)
    run: Run = field(repr=False)

    @property
    def exposed_total(self) -> float:
        """All communication cost the step pays: sum of ``exposed`` plus ``contention``."""
        return sum(self.exposed.values()) + self.contention

    def summary(self) -> dict[str, float]:
        """Flat dict (for tables): step, compute, exposed per kind, contention, idle."""
        out = {"step_time": self.step_time, "compute": self.compute}
        out.update({f"exposed_{k}": v for k, v in self.exposed.items()})
        out.update({"contention": self.contention, "idle": self.idle})
        return out


class _Program:
    """Ops in program order; ``serial`` chains each op after the previous one."""

    def __init__(self, serial: bool) -> None:
        self.ops: list[Op] = []
        self.serial = serial
        self.last_compute: str | None = None
        self.pending: list[str] = []  # comm ops the next compute op must wait for

    def add(self, op: Op) -> str:
        deps = tuple(dict.fromkeys(op.deps))
        if self.serial and self.ops:
            deps = tuple(dict.fromkeys(deps + (self.ops[-1].name,)))
        self.ops.append(Op(op.name, op.stream, op.duration, op.kind, deps, op.release,
                           op.layer, op.microbatch))
        return op.name

    def compute(self, name: str, dur, layer=None, mb=None, deps=(), release=0.0) -> str:
        self.add(Op(name, COMPUTE, dur, "compute", tuple(deps) + tuple(self.pending),
                    release, layer, mb))
        self.pending = []
        self.last_compute = name
        return name

    def comm(self, name: str, link: str, dur, kind: str, deps=(), layer=None, mb=None) -> str:
        return self.add(Op(name, link, dur, kind, tuple(deps), 0.0, layer, mb))

    def segment(self, name: str, dur, comm_dur, link: str | None, kind: str, mode: str,
                steps: int, layer, mb, deps, release) -> None:
        """A piece of a layer's compute with its own communication.

        ``mode="block"``: compute, then the collective, and the next compute waits for it.
        ``"prefetch"`` (ring attention): the compute is cut into ``steps + 1`` chunks; chunk
        ``c`` waits for transfer ``c - 1``, which ran during chunk ``c - 1`` (the first block
        is local). ``"drain"`` (collective matmul / async TP, a reduce-scatter fed by matmul
        chunks): ``steps`` chunks, each chunk's transfer runs during the next chunk, and the
        next compute waits for the last transfer (it cannot hide).
        """
        if comm_dur == 0 or link is None:
            self.compute(name, dur, layer, mb, deps, release)
        elif mode == "block" or steps < 1:
            self.compute(name, dur, layer, mb, deps, release)
            self.pending = [self.comm(f"{name}.{kind}", link, comm_dur, kind,
                                      [name], layer, mb)]
        elif mode == "prefetch":
            before = [self.last_compute] if self.last_compute else []
            prev = None
            for c in range(steps + 1):
                c_deps = list(deps) + ([prev] if prev else [])
                self.compute(f"{name}.c{c}", dur / (steps + 1), layer, mb, c_deps,
                             release if c == 0 else 0.0)
                if c < steps:
                    prev = self.comm(f"{name}.{kind}{c}", link, comm_dur / steps, kind,
                                     before + ([prev] if prev else []), layer, mb)
                deps = ()
        else:  # drain
            last = None
            for c in range(steps):
                cname = self.compute(f"{name}.c{c}", dur / steps, layer, mb,
                                     deps if c == 0 else (), release if c == 0 else 0.0)
                last = self.comm(f"{name}.{kind}{c}", link, comm_dur / steps, kind,
                                 [cname], layer, mb)
            self.pending = [last]


def _check_times(name: str, ts) -> list:
    try:
        ts = list(ts)
    except TypeError:
        raise ValueError(f"{name} must be a sequence of seconds, one per layer") from None
    if not ts:
        raise ValueError(f"{name} is empty: give one time per layer of this rank")
    for x in ts:
        if not isinstance(x, Real) or isinstance(x, bool) or not x >= 0:
            raise ValueError(f"{name} holds {x!r}: every layer time must be a number >= 0 s")
    return ts


def _check_schedule(schedule, microbatches: int) -> list[tuple[str, int, float]]:
    if schedule is None:
        return [(p, m, 0.0) for m in range(microbatches) for p in ("F", "B")]
    out, seen = [], set()
    for entry in schedule:
        if not (isinstance(entry, tuple) and len(entry) == 3 and entry[0] in ("F", "B")):
            raise ValueError(f"schedule entry {entry!r}: use (\"F\" or \"B\", microbatch, "
                             "release seconds)")
        p, m, r = entry
        if isinstance(m, bool) or not isinstance(m, int) or not 0 <= m < microbatches:
            raise ValueError(f"schedule entry {entry!r}: microbatch must be an int in "
                             f"[0, {microbatches})")
        if not isinstance(r, Real) or not r >= 0:
            raise ValueError(f"schedule entry {entry!r}: release must be >= 0 s")
        if (p, m) in seen or (p == "B" and ("F", m) not in seen):
            raise ValueError(f"schedule entry {entry!r}: each microbatch needs one F before "
                             "one B")
        seen.add((p, m))
        out.append((p, m, r))
    if len(seen) != 2 * microbatches:
        raise ValueError(f"schedule has {len(seen)} actions: give F and B of each of the "
                         f"{microbatches} microbatches")
    return out


def step_timeline(
    t_fwd: Sequence[float],
    t_bwd: Sequence[float],
    *,
    microbatches: int = 1,
    dp: DPTraffic | None = None,
    tp: TPTraffic | None = None,
    cp: CPTraffic | None = None,
    pp: PPTraffic | None = None,
    schedule: Sequence[tuple[str, int, float]] | None = None,
    contention: float = NCCL_SM_SLOWDOWN,
    overlap: bool = True,
) -> StepTimeline:
    """Step time, exposed communication per kind and the two-stream timeline of one rank.

    ``t_fwd[i]``, ``t_bwd[i]``: compute seconds of layer ``i``'s forward and backward (input
    and weight gradients, recomputation included) for ONE microbatch, without communication.
    ``microbatches``: gradient-accumulation steps (or the pipeline's microbatches).
    ``dp``, ``tp``, ``cp``, ``pp``: the traffic (:mod:`tpp.data_parallel.overlap.traffic`),
    ``None`` = none.
    ``schedule``: the rank's actions in order as ``(phase, microbatch, release)``, phase
    ``"F"``/``"B"``, release the earliest start in s (:func:`rank_schedule` reads them from a
    pipeline simulation); default: F then B of each microbatch, no release.
    ``contention``: compute speed lost while a collective runs (default
    :data:`tpp.data_parallel.overlap.contention.NCCL_SM_SLOWDOWN`). ``overlap=False``: nothing
    overlaps.
    """
    t_fwd, t_bwd = _check_times("t_fwd", t_fwd), _check_times("t_bwd", t_bwd)
    if len(t_fwd) != len(t_bwd):
        raise ValueError(f"t_fwd has {len(t_fwd)} layers and t_bwd {len(t_bwd)}: give both "
                         "one time per layer")
    if isinstance(microbatches, bool) or not isinstance(microbatches, int) or microbatches < 1:
        raise ValueError(f"microbatches={microbatches!r} must be an int >= 1")
    for name, v, cls in (("dp", dp, DPTraffic), ("tp", tp, TPTraffic), ("cp", cp, CPTraffic),
                         ("pp", pp, PPTraffic)):
        if v is not None and not isinstance(v, cls):
            raise ValueError(f"{name} must be a tpp.data_parallel.overlap.{cls.__name__} or None")
    links: dict[str, tuple] = {}
    for v in (dp, tp, cp, pp):
        if v is not None:
            key = (v.link.bandwidth, v.link.latency)
            if links.setdefault(v.link.name, key) != key:
                raise ValueError(f"two links are named {v.link.name!r} with different bandwidth"
                                 " or latency: one name is one wire; rename one of them")
    L, M = len(t_fwd), microbatches
    actions = _check_schedule(schedule, M)
    prog = _Program(serial=not overlap)
    stage = dp.stage if dp is not None else None
    zero3 = stage == 3
    param_gather = stage in (1, 2)
    buckets = dp.buckets(L) if dp is not None else []
    grad_op = "all_reduce" if stage == 0 else "reduce_scatter"
    first_f = next(i for i, a in enumerate(actions) if a[0] == "F")
    last_b = max(i for i, a in enumerate(actions) if a[0] == "B")
    layer_bytes = dp.bytes_of(L) if dp is not None else []
    d = dp.prefetch if dp is not None else 0
    # positions (phase, mb, layer) of every layer op, in compute order; gathers keyed by them
    positions = [(p, m, i) for p, m, _ in actions
                 for i in (range(L) if p == "F" else reversed(range(L)))]
    end_of: list[str] = []  # name of the last compute op of each position
    gathers: dict[int, str] = {}
    grads: list[str] = []

    def gather(q: int) -> None:  # FSDP all-gather for position q, prefetch d ahead
        if q >= len(positions) or q in gathers:
            return
        p, m, i = positions[q]
        deps = [end_of[q - d - 1]] if q - d - 1 >= 0 else []
        gathers[q] = prog.comm(f"AG.{p}{i}.mb{m}", dp.link.name,
                               dp.time("all_gather", layer_bytes[i]), "dp_param", deps, i, m)

    pgathers: dict[int, str] = {}

    def pgather(i: int) -> None:  # distributed optimizer's gather for layer i, next-step forward
        if i >= L or i in pgathers:
            return
        deps = [end_of[first_pos + i - d - 1]] if i - d - 1 >= 0 else []
        pgathers[i] = prog.comm(f"AG.param{i}", dp.link.name,
                                dp.time("all_gather", layer_bytes[i]), "dp_param", deps, i)

    first_pos = sum(L for _ in actions[:first_f])
    pos = 0
    for a_idx, (p, m, release) in enumerate(actions):
        reduce_here = dp is not None and dp.group_size > 1 and stage != 3 and (
            (stage == 2 and p == "B") or (a_idx == last_b))
        pg_here = (param_gather and dp.overlap_param_gather and a_idx == first_f
                   and dp.group_size > 1)
        per_layer = (tp is not None or cp is not None or zero3 or reduce_here or pg_here)
        if not per_layer:
            times = t_fwd if p == "F" else t_bwd
            name = prog.compute(f"{p}.mb{m}", sum(times), None, m, (), release)
            end_of.extend([name] * L)
            pos += L
        for k in range(L if per_layer else 0):
            i = k if p == "F" else L - 1 - k
            deps = []
            if zero3 and dp.group_size > 1:
                for q in range(pos, pos + d + 1) if pos == 0 else (pos + d,):
                    gather(q)
                deps.append(gathers[pos])
            if pg_here:
                for j in range(k, k + d + 1) if k == 0 else (k + d,):
                    pgather(j)
                deps.append(pgathers[i])
            t = t_fwd[i] if p == "F" else t_bwd[i]
            c_share = cp.share if cp is not None else 0
            t_cp = t * c_share
            rel = release if k == 0 else 0.0
            tp_c = (tp.forward if p == "F" else tp.backward) if tp is not None else 0
            prog.segment(f"{p}{i}.mb{m}", t - t_cp, tp_c, tp.link.name if tp else None,
                         "tp", "drain" if tp and tp.decomposed else "block",
                         tp.steps if tp else 0,
                         i, m, deps, rel)
            if cp is not None:
                cp_c = cp.forward if p == "F" else cp.backward
                prog.segment(f"{p}{i}.mb{m}.attn", t_cp, cp_c, cp.link.name, "cp",
                             "prefetch" if cp.overlap else "block", cp.steps, i, m, (), 0.0)
            end_of.append(prog.last_compute)
            if zero3 and p == "B" and dp.group_size > 1:
                grads.append(prog.comm(f"RS{i}.mb{m}", dp.link.name,
                                       dp.time("reduce_scatter", layer_bytes[i]), "dp_grad",
                                       [prog.last_compute], i, m))
            if reduce_here and p == "B" and dp.overlap_grad_reduce:
                for j, (ready, nbytes) in enumerate(buckets):
                    if ready == i:
                        grads.append(prog.comm(f"{grad_op}.bucket{j}.mb{m}", dp.link.name,
                                               dp.time(grad_op, nbytes), "dp_grad",
                                               [prog.last_compute], i, m))
            pos += 1
        if reduce_here and p == "B" and not dp.overlap_grad_reduce:
            for j, (ready, nbytes) in enumerate(buckets):
                grads.append(prog.comm(f"{grad_op}.bucket{j}.mb{m}", dp.link.name,
                                       dp.time(grad_op, nbytes), "dp_grad",
                                       [prog.last_compute], ready, m))
        if pp is not None:
            dur = pp.send_forward if p == "F" else pp.send_backward
            s = prog.comm(f"send.{p}.mb{m}", pp.link.name, dur, "pp", [prog.last_compute],
                          None, m)
            if not pp.overlap:
                prog.pending.append(s)
    if dp is not None:
        prog.compute("optimizer", dp.optimizer_time, deps=grads)
        if param_gather and dp.group_size > 1 and not dp.overlap_param_gather:
            for i in range(L):
                prog.comm(f"AG.param{i}", dp.link.name, dp.time("all_gather", layer_bytes[i]),
                          "dp_param", ["optimizer"], i)
    res = run(prog.ops, contention)
    comm = {k: 0.0 for k in KINDS}
    for op in prog.ops:
        if op.stream != COMPUTE:
            comm[op.kind] += op.duration
    exposed = {k: res.exposed.get(k, 0.0) for k in KINDS}
    link_busy = {s: b for s, b in res.busy.items() if s != COMPUTE}
    return StepTimeline(res.makespan, res.compute, exposed, res.contention, res.idle, comm,
                        link_busy, res.events, res)


def rank_schedule(sim, rank: int) -> list[tuple[str, int, float]]:
    """The ``(phase, microbatch, release)`` actions of ``rank`` in a :func:`tpp.pipeline.simulate`
    result, release = the action's start in the simulation (its cross-rank dependencies).

    Only schedules with one stage per rank and whole backwards (F and B; 1F1B, GPipe) are
    accepted: interleaved chunks and split backwards (I, W) raise ValueError.
    """
    acts = sorted((start, a) for r, a, start, _ in sim.timeline if r == rank)
    if not acts:
        raise ValueError(f"rank {rank} has no actions in this simulation: use 0 <= rank < P")
    stages = {a.stage for _, a in acts}
    if len(stages) > 1 or any(getattr(a, "kind", None) not in ("F", "B") for _, a in acts):
        raise ValueError("rank_schedule takes one stage per rank with F and B actions only "
                         "(1F1B, GPipe); interleaved or split-backward schedules are not "
                         "supported: simulate with v=1 and whole backwards")
    return [(a.kind, a.microbatch, float(start)) for start, a in acts]
