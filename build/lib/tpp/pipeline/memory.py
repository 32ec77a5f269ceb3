"""Activation memory of a simulated pipeline: sets held per rank over time, in counts or bytes.

Mixed into :class:`tpp.pipeline.simulate.SimResult`, which provides ``timeline``, ``makespan``,
``ranks``, ``recompute`` and ``_inflight_cache``. See its docstring for the accounting rules.
"""

from __future__ import annotations

from numbers import Real

from tpp.pipeline.ir import Overlap

Time = Real  # int, Fraction or float


class ActivationMemory:
    """Memory accounting over a simulated timeline (``peak_inflight``, bytes with recompute)."""

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
            for r, a, s, e in self.timeline:
                if r != rank:
                    continue
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

    def activation_bytes_over_time(self, rank: int, stage_bytes: Time,
                                   input_bytes: Time = 0) -> tuple[list, list]:
        """Step function ``(times, bytes)`` of the activations ``rank`` holds.

        ``stage_bytes``: what one stage stores for the backward of one microbatch;
        ``input_bytes``: that stage's input (one boundary activation). Without recompute a set
        weighs ``stage_bytes`` from the start of its F to the end of its B (or W). With
        ``recompute`` it weighs ``input_bytes`` over that span, and the rank holds
        ``stage_bytes`` more from the start of each backward (B, I or an F&B pair) to the end
        of that microbatch's B (or W): the re-materialised activations of one stage."""
        for name, x in (("stage_bytes", stage_bytes), ("input_bytes", input_bytes)):
            if not isinstance(x, Real) or isinstance(x, bool) or x < 0:
                raise ValueError(f"{name} must be a non-negative number of bytes (got {x!r})")
        held = input_bytes if self.recompute else stage_bytes
        events: list[tuple[Time, Time]] = []
        back_start: dict[tuple[int, int], Time] = {}
        rows = sorted((s, e, a) for r, a, s, e in self.timeline if r == rank)
        for s, e, a in rows:
            if type(a) is Overlap:
                events += [(s, held), (e, -held)]
                if self.recompute:
                    events += [(s, stage_bytes), (e, -stage_bytes)]
                continue
            if a.kind == "F":
                events.append((s, held))
            elif a.kind == "I":
                back_start[(a.stage, a.microbatch)] = s
            elif a.kind in ("B", "W"):
                events.append((e, -held))
                if self.recompute:
                    start = s if a.kind == "B" else back_start[(a.stage, a.microbatch)]
                    events += [(start, stage_bytes), (e, -stage_bytes)]
        events.sort(key=lambda x: (x[0], x[1]))
        times: list = [0 * self.makespan]
        amounts: list = [0 * held]
        level = 0 * held
        for t, delta in events:
            level = level + delta
            if t == times[-1]:
                amounts[-1] = level
            else:
                times.append(t)
                amounts.append(level)
        return times, amounts

    def peak_activation_bytes(self, stage_bytes: Time, input_bytes: Time = 0) -> list[Time]:
        """Peak of :meth:`activation_bytes_over_time` for every rank."""
        return [max(self.activation_bytes_over_time(r, stage_bytes, input_bytes)[1])
                for r in range(self.ranks)]
