"""The schedule IR: actions ``F``/``B``/``I``/``W`` on (stage, microbatch) and per-rank lists.

An :class:`Action` prints compactly as ``"<stage><kind><microbatch>"`` (``0F1``, ``5B3``), the
notation of PyTorch's ``torch.distributed.pipelining`` IR. Indices are **0-based**: stages run
``0 .. P*v - 1`` (global stage index), microbatches ``0 .. M - 1``. With ``v`` virtual stages per
rank (interleaving), global stage ``s`` lives on rank ``s mod P``.

Kinds:

* ``F`` forward of one microbatch through one stage;
* ``B`` full backward (input gradient and weight gradient together);
* ``I`` input-gradient backward only (what the previous stage waits for);
* ``W`` weight-gradient backward only (nobody waits for it; Qi et al. 2024, sec. 2.1).

An :class:`Overlap` is one forward and one full backward of *different* microbatches run together
on one rank (DualPipe's "F&B" chunk, PyTorch's ``OVERLAP_F_B``): it prints as ``"3F5&4B1"``,
starts when both halves may start and costs its own time (``overlap`` in the simulator).

Placement: by default stage ``s`` is on rank ``s mod P`` (a loop). ``Schedule.stage_ranks`` can
place stages otherwise (a V: stages ``r`` and ``2P - 1 - r`` on rank ``r``), and
``Schedule.mirrored_from`` makes microbatches ``m >= mirrored_from`` enter from the other end
(DualPipe: rank ``P - 1 - r`` runs what rank ``r`` runs for the first half).
"""

from __future__ import annotations

import gc
import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple

KINDS: tuple[str, ...] = ("F", "B", "I", "W")
_ACTION_RE = re.compile(r"^\s*(\d+)\s*([FBIW])\s*(\d+)\s*$")
_OVERLAP_RE = re.compile(r"^\s*(\d+\s*F\s*\d+)\s*&\s*(\d+\s*B\s*\d+)\s*$")


@contextmanager
def no_gc() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while building or simulating large schedules.

    Hundreds of thousands of small tuples trigger many collections that find nothing (actions hold
    no cycles); pausing them saves about a third of the time. The previous state is restored."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class Action(NamedTuple):
    """One operation: ``kind`` (F, B, I or W) of ``microbatch`` on global ``stage`` (0-based)."""

    stage: int
    kind: str
    microbatch: int

    def __str__(self) -> str:
        return f"{self.stage}{self.kind}{self.microbatch}"

    def __repr__(self) -> str:
        return f"Action({self})"


class Overlap(NamedTuple):
    """A forward and a full backward of two microbatches overlapped on one rank (``"3F5&4B1"``).

    DualPipe (DeepSeek-AI 2024, sec. 3.2.1) pairs them so that one's communication hides behind
    the other's computation; the simulator charges the pair its own time ``overlap``."""

    forward: Action
    backward: Action

    @property
    def kind(self) -> str:
        return "F&B"

    def __str__(self) -> str:
        return f"{self.forward}&{self.backward}"

    def __repr__(self) -> str:
        return f"Overlap({self})"

    def expand(self) -> tuple[Action, Action]:
        """The two halves, forward first (PyTorch's sub-actions order)."""
        return (self.forward, self.backward)


Step = Action | Overlap


def expand(row: Iterable[Step]) -> list[Action]:
    """A rank's actions with every :class:`Overlap` replaced by its forward then its backward."""
    out: list[Action] = []
    for a in row:
        if type(a) is Overlap:
            out.extend(a)
        else:
            out.append(a)
    return out


def parse_action(text: str) -> Step:
    """Parse the compact form ``"0F1"`` (stage 0, forward, microbatch 1) into an :class:`Action`,
    or ``"3F5&4B1"`` into an :class:`Overlap`.

    >>> parse_action("5B3")
    Action(5B3)
    >>> parse_action("3F5&4B1")
    Overlap(3F5&4B1)
    """
    if isinstance(text, Action | Overlap):
        return text
    pair = _OVERLAP_RE.match(str(text))
    if pair is not None:
        return Overlap(parse_action(pair.group(1)), parse_action(pair.group(2)))
    match = _ACTION_RE.match(str(text))
    if match is None:
        raise ValueError(
            f"cannot parse action {text!r}: write <stage><kind><microbatch> with kind one of "
            f"F, B, I, W, e.g. '0F1' or '5B3' (or an overlapped pair '3F5&4B1')"
        )
    return Action(int(match.group(1)), match.group(2), int(match.group(3)))


@dataclass
class Schedule:
    """A pipeline schedule: ``actions[r]`` is rank ``r``'s list of actions in execution order.

    ``ranks`` is P, ``microbatches`` is M, ``virtual`` is v (model chunks per rank), so the model
    has ``stages = P * v`` stages and stage ``s`` runs on rank ``s % P``.
    """

    name: str
    ranks: int
    microbatches: int
    virtual: int
    actions: list[list[Step]]
    stage_ranks: tuple[int, ...] | None = None
    mirrored_from: int | None = None

    @property
    def stages(self) -> int:
        """Number of global stages S = P * v."""
        return self.ranks * self.virtual

    def rank_of(self, stage: int, microbatch: int = 0) -> int:
        """Rank that runs global ``stage`` of ``microbatch``: ``stage mod P`` by default, else
        ``stage_ranks[stage]``; mirrored (rank ``P - 1 - r``) for ``microbatch >=
        mirrored_from``."""
        r = stage % self.ranks if self.stage_ranks is None else self.stage_ranks[stage]
        if self.mirrored_from is not None and microbatch >= self.mirrored_from:
            r = self.ranks - 1 - r
        return r

    def homes(self) -> tuple[list[int], list[int]]:
        """Rank of every stage for microbatches before / from ``mirrored_from`` (simulator)."""
        S, P = self.stages, self.ranks
        home = [self.rank_of(s) for s in range(S)]
        mirror = [P - 1 - r for r in home] if self.mirrored_from is not None else home
        return home, mirror

    def compute_order(self) -> list[list[Action]]:
        """Per rank, the actions with overlapped pairs expanded (forward first)."""
        return [expand(row) for row in self.actions]

    @property
    def num_actions(self) -> int:
        return sum(len(row) for row in self.actions)

    def __str__(self) -> str:
        width = max((len(str(a)) for row in self.actions for a in row), default=3)
        lines = [f"{self.name}: P={self.ranks} M={self.microbatches} v={self.virtual}"]
        for r, row in enumerate(self.actions):
            lines.append(f"rank {r}: " + " ".join(str(a).rjust(width) for a in row))
        return "\n".join(lines)

    @property
    def has_overlap(self) -> bool:
        return any(type(a) is Overlap for row in self.actions for a in row)

    def to_strings(self) -> list[list[str]]:
        """The compact form of every action, rank by rank."""
        return [[str(a) for a in row] for row in self.actions]

    @classmethod
    def from_strings(
        cls,
        rows: str | Sequence[str | Iterable[str | Action]],
        microbatches: int | None = None,
        virtual: int | None = None,
        name: str = "custom",
    ) -> Schedule:
        """Build a hand-written schedule, one row per rank.

        ``rows`` is a list (one entry per rank) of either a whitespace-separated string
        (``"0F0 0F1 0B0 0B1"``) or a list of compact actions; or one multi-line string.
        ``microbatches`` defaults to 1 + the largest microbatch index, ``virtual`` to the number of
        stages (1 + largest stage) divided by the number of ranks. Nothing is checked beyond
        parsing: call :func:`tpp.pipeline.validate`.
        """
        if isinstance(rows, str):
            rows = [line for line in rows.strip().splitlines() if line.strip()]
        parsed: list[list[Step]] = []
        for row in rows:
            items = row.split() if isinstance(row, str) else list(row)
            parsed.append([parse_action(x) for x in items])
        ranks = len(parsed)
        if ranks == 0:
            raise ValueError("a schedule needs at least one rank: give one row per rank")
        all_actions = [a for row in parsed for a in expand(row)]
        if microbatches is None:
            microbatches = 1 + max((a.microbatch for a in all_actions), default=0)
        if virtual is None:
            n_stages = 1 + max((a.stage for a in all_actions), default=0)
            virtual = max(1, -(-n_stages // ranks))
        return cls(name, ranks, int(microbatches), int(virtual), parsed)
