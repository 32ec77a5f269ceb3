"""A two-stream timeline: compute and communication ops of one rank, run as CUDA streams run.

Each :class:`Op` sits on one *stream*: ``"compute"`` (the SMs running the layer's kernels) or a
link name (``"nvlink"``, ``"nic"``, ...). Ops on one stream run one at a time in the order they
are listed (a CUDA stream, or NCCL kernels queued on one network link: traffic that shares a
link serializes); ops on different streams run at the same time. An op starts when its stream is
free, every op in ``deps`` has finished and its ``release`` time has come (e.g. a pipeline
dependency on another rank, read from :func:`tpp.pipeline.simulate`).

Contention (a fluid model): while any communication op is running, NCCL's kernels hold some of
the GPU's SMs, and a compute op progresses at rate ``1 - contention`` instead of 1
(:data:`tpp.data_parallel.overlap.contention.NCCL_SM_SLOWDOWN` states the default and its source).
Communication ops progress at rate 1: their durations are alpha-beta times
(:func:`tpp.collectives.alpha_beta_time`).

:func:`run` returns every op's start and end and the decomposition of the makespan::

    makespan = compute + exposed[kind] summed + contention + idle

``compute``: the compute ops' durations at full speed; ``exposed[kind]``: time the compute stream
stood still while communication of ``kind`` ran (split equally when several kinds ran at once);
``contention``: the extra compute time caused by the slowdown; ``idle``: time the compute stream
stood still with no communication running (waiting for a release: the pipeline bubble).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from numbers import Real

__all__ = ["COMPUTE", "Op", "Event", "Run", "run"]

#: The name of the compute stream.
COMPUTE = "compute"


@dataclass(frozen=True)
class Op:
    """One kernel (compute) or one collective (communication).

    ``name``: unique label (e.g. ``"B3.mb1"``, ``"AR.bucket2"``); ``stream``: :data:`COMPUTE` or a
    link name; ``duration``: seconds at full speed; ``kind``: what it belongs to (``"compute"``,
    ``"dp"``, ``"fsdp"``, ``"zero"``, ``"tp"``, ``"cp"``, ``"pp"``); ``deps``: names of ops that
    must finish first; ``release``: earliest start (s); ``layer``, ``microbatch``: for plots.
    """

    name: str
    stream: str
    duration: float
    kind: str = "compute"
    deps: tuple[str, ...] = ()
    release: float = 0.0
    layer: int | None = None
    microbatch: int | None = None


@dataclass(frozen=True)
class Event:
    """Where one op ran: ``start`` and ``end`` in seconds, with the op itself."""

    op: Op
    start: float
    end: float

    @property
    def stream(self) -> str:
        return self.op.stream

    @property
    def kind(self) -> str:
        return self.op.kind


@dataclass
class Run:
    """Outcome of :func:`run`: events and the decomposition of the makespan (seconds)."""

    events: list[Event]
    makespan: float
    compute: float
    exposed: dict[str, float] = field(default_factory=dict)
    contention: float = 0.0
    idle: float = 0.0
    busy: dict[str, float] = field(default_factory=dict)

    def event(self, name: str) -> Event:
        """The event of the op named ``name``."""
        for e in self.events:
            if e.op.name == name:
                return e
        raise ValueError(f"no op named {name!r} in this timeline")


def _check_ops(ops: list[Op], contention) -> None:
    if not isinstance(contention, Real) or isinstance(contention, bool) \
            or not 0 <= contention < 1:
        raise ValueError(f"contention={contention!r} must be a number in [0, 1): the share of "
                         "compute speed lost while NCCL kernels hold SMs (0 = none)")
    names = set()
    for op in ops:
        if not isinstance(op, Op):
            raise ValueError("ops must be tpp.data_parallel.overlap.Op instances, "
                             f"got {type(op).__name__}")
        if op.name in names:
            raise ValueError(f"two ops are named {op.name!r}: give every op a unique name")
        names.add(op.name)
        if not isinstance(op.duration, Real) or not op.duration >= 0:
            raise ValueError(f"op {op.name!r} has duration={op.duration!r}: use seconds >= 0")
        if not isinstance(op.release, Real) or not op.release >= 0:
            raise ValueError(f"op {op.name!r} has release={op.release!r}: use seconds >= 0")
    for op in ops:
        for d in op.deps:
            if d not in names:
                raise ValueError(f"op {op.name!r} depends on {d!r}, which is not in ops: "
                                 "list every dependency")


def run(ops: list[Op], contention: float = 0.0) -> Run:
    """Run ``ops`` on their streams (see the module docstring) and return the :class:`Run`.

    Raises ValueError on a bad op, a missing dependency, or a deadlock (an op waiting for one
    listed after it on its own stream).
    """
    ops = list(ops)
    _check_ops(ops, contention)
    queues: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        queues[op.stream].append(op)
    head = {s: 0 for s in queues}
    active: dict[str, list] = {}  # stream -> [op, remaining work, start]
    done: dict[str, float] = {}
    events: list[Event] = []
    exposed: dict[str, float] = defaultdict(float)
    idle = 0 * contention
    t = 0
    slow = 1 - contention

    known = defaultdict(int)  # op name -> how many of its deps (in order) are known done

    def ready(op: Op) -> bool:
        # a dep once done stays done: resume the scan where the last call stopped (each dep
        # is looked at about once per op instead of once per event)
        deps, i = op.deps, known[op.name]
        while i < len(deps) and deps[i] in done:
            i += 1
        known[op.name] = i
        return i == len(deps)

    while len(done) < len(ops):
        # start every op that can start now
        for s, q in queues.items():
            if s not in active and head[s] < len(q):
                op = q[head[s]]
                if ready(op) and op.release <= t:
                    active[s] = [op, op.duration, t]
                    head[s] += 1
        comm_on = [a[0] for s, a in active.items() if s != COMPUTE]
        rate = {s: (slow if s == COMPUTE and comm_on else 1) for s in active}
        # next event: an active op finishing or a waiting head's release
        candidates = [a[1] / rate[s] for s, a in active.items()]
        for s, q in queues.items():
            if s not in active and head[s] < len(q):
                op = q[head[s]]
                if ready(op) and op.release > t:
                    candidates.append(op.release - t)
        if not candidates:
            waiting = [q[head[s]].name for s, q in queues.items() if head[s] < len(q)]
            raise ValueError(f"deadlock: ops {waiting} wait for each other; an op may depend on "
                             "one queued after it on its own stream")
        dt = min(candidates)
        if COMPUTE not in active and dt > 0:
            kinds = sorted({op.kind for op in comm_on})
            if kinds:
                for k in kinds:
                    exposed[k] += dt / len(kinds)
            else:
                idle += dt
        t = t + dt
        for s in list(active):
            a = active[s]
            a[1] -= dt * rate[s]
            if a[1] <= 1e-12 * max(1.0, float(a[0].duration)) or a[1] <= 0:
                events.append(Event(a[0], a[2], t))
                done[a[0].name] = t
                del active[s]
    makespan = max((e.end for e in events), default=0)
    compute = sum(op.duration for op in queues.get(COMPUTE, []))
    ran = sum(e.end - e.start for e in events if e.stream == COMPUTE)
    busy = {s: sum(e.end - e.start for e in events if e.stream == s) for s in queues}
    return Run(events, makespan, compute, dict(exposed), ran - compute, idle, busy)
