"""Activation memory of a simulated pipeline: sets held per rank over time, in counts or bytes.

Mixed into :class:`tpp.pipeline.simulate.SimResult`, which provides ``timeline``, ``makespan``,
``ranks``, ``recompute`` and ``_inflight_cache``. See its docstring for the accounting rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Real

from tpp.pipeline.ir import Overlap

Time = Real  # int, Fraction or float


def _per_stage(name: str, x):
    """``x`` as a function of the global stage: a number for all, or a sequence by stage."""
    def bad(v) -> bool:
        return not isinstance(v, Real) or isinstance(v, bool) or v < 0
    if isinstance(x, Sequence) and not isinstance(x, (str, bytes)):
        if not x or any(bad(v) for v in x):
            raise ValueError(f"{name} must be non-negative numbers of bytes, one per global "
                             f"stage (got {x!r})")
        vals = list(x)

        def get(stage: int):
            if not 0 <= stage < len(vals):
                raise ValueError(f"{name} has {len(vals)} entries but the schedule has stage "
                                 f"{stage}: give one per global stage (P x v)")
            return vals[stage]
        return get
    if bad(x):
        raise ValueError(f"{name} must be a non-negative number of bytes (got {x!r})")
    return lambda stage: x


class ActivationMemory:
    """Memory accounting over a simulated timeline (``peak_inflight``, bytes with recompute)."""

    def _rows_of(self, rank: int) -> list:
        """The timeline's ``(rank, action, start, end)`` rows of ``rank``, in timeline order: the
        timeline grouped by rank once, so that a query per rank does not read every rank's rows
        (P queries of a P-rank timeline were quadratic in P: the planner's searches)."""
        by_rank = self.__dict__.get("_rows_by_rank")
        if by_rank is None:
            by_rank = {}
            for row in self.timeline:
                by_rank.setdefault(row[0], []).append(row)
            self.__dict__["_rows_by_rank"] = by_rank
        return by_rank.get(rank, [])

    def inflight_over_time(self, rank: int, release: str = "last") -> tuple[list, list]:
        """Step function of activation sets held by ``rank``: ``(times, counts)`` where
        ``counts[i]`` holds from ``times[i]`` until ``times[i+1]`` (the last is 0 at the end).

        ``release="last"`` frees a set when its B or W ends (default, see the class docstring);
        ``release="I"`` frees it when its input gradient (B or I) ends instead.
        """
        if release not in ("last", "I"):
            raise ValueError(f"release must be 'last' or 'I' (got {release!r})")
        key = (rank, release)
        if key not in self._inflight_cache:
            freeing = {"B", "W"} if release == "last" else {"B", "I"}
            events = []
            for _r, a, s, e in self._rows_of(rank):
                if type(a) is Overlap:  # the F half acquires, the B half releases
                    events.append((s, 1))
                    events.append((e, -1))
                elif a.kind == "F":
                    events.append((s, 1))
                elif a.kind in freeing:
                    events.append((e, -1))
            events.sort(key=lambda x: (x[0], x[1]))
            times: list = [0 * self.makespan]
            counts = [0]
            level = 0
            for t, delta in events:
                level += delta
                if t == times[-1]:
                    counts[-1] = level
                else:
                    times.append(t)
                    counts.append(level)
            self._inflight_cache[key] = (times, counts)
        return self._inflight_cache[key]

    @property
    def peak_inflight(self) -> list[int]:
        return [max(self.inflight_over_time(r)[1]) for r in range(self.ranks)]

    def peak_inflight_until(self, release: str) -> list[int]:
        """Peak per rank with the given release rule (see :meth:`inflight_over_time`)."""
        return [max(self.inflight_over_time(r, release)[1]) for r in range(self.ranks)]

    def activation_bytes_over_time(self, rank: int, stage_bytes, input_bytes=0
                                   ) -> tuple[list, list]:
        """Step function ``(times, bytes)`` of the activations ``rank`` holds.

        ``stage_bytes``: what one stage stores for the backward of one microbatch;
        ``input_bytes``: that stage's input (one boundary activation). Each is a number (every
        stage the same) or a sequence indexed by global stage (chunks of uneven sizes: an
        interleaved rank holding chunks of 5 and 4 layers weighs each set by its own chunk, not
        by the largest). Without recompute a set weighs ``stage_bytes`` from the start of its F
        to the end of its B (or W). With ``recompute`` it weighs ``input_bytes`` over that
        span, and the rank holds ``stage_bytes`` more from the start of each backward (B, I or
        an F&B pair) to the end of that microbatch's B (or W): the re-materialised activations
        of one stage."""
        sb, ib = _per_stage("stage_bytes", stage_bytes), _per_stage("input_bytes", input_bytes)

        def held(stage: int):
            return ib(stage) if self.recompute else sb(stage)

        events: list[tuple[Time, Time]] = []
        back_start: dict[tuple[int, int], Time] = {}
        rows = sorted((s, e, a) for _r, a, s, e in self._rows_of(rank))
        for s, e, a in rows:
            if type(a) is Overlap:
                fs, bs = a.forward.stage, a.backward.stage
                events += [(s, held(fs)), (e, -held(bs))]
                if self.recompute:
                    events += [(s, sb(bs)), (e, -sb(bs))]
                continue
            if a.kind == "F":
                events.append((s, held(a.stage)))
            elif a.kind == "I":
                back_start[(a.stage, a.microbatch)] = s
            elif a.kind in ("B", "W"):
                events.append((e, -held(a.stage)))
                if self.recompute:
                    start = s if a.kind == "B" else back_start[(a.stage, a.microbatch)]
                    events += [(start, sb(a.stage)), (e, -sb(a.stage))]
        events.sort(key=lambda x: (x[0], x[1]))
        zero = 0 * sb(0)
        times: list = [0 * self.makespan]
        amounts: list = [zero]
        level = zero
        for t, delta in events:
            level = level + delta
            if t == times[-1]:
                amounts[-1] = level
            else:
                times.append(t)
                amounts.append(level)
        return times, amounts

    def peak_activation_bytes(self, stage_bytes, input_bytes=0) -> list[Time]:
        """Peak of :meth:`activation_bytes_over_time` for every rank (numbers or per-stage
        sequences, as there)."""
        return [max(self.activation_bytes_over_time(r, stage_bytes, input_bytes)[1])
                for r in range(self.ranks)]
