"""Benchmark ``tpp grade``: 30 generated submissions of one exercise with ``-j 2``.

Every submission gets its own fresh kernel (nothing is reused across students), so kernel
start-up dominates. Every kernel runs in the OS sandbox (bubblewrap) unless ``--unsandboxed``;
the run prints the sandboxed and the unsandboxed throughput side by side with ``--compare``.
Goal: >= 100 submissions per minute at ``-j 2`` on a 2-core machine, sandbox on.

Usage: ``.venv/bin/python bench/bench_grade.py [--n 30] [-j 2] [--assignment ex07_bubble]``
(default: the demo exercise of ``tpp.grading.example``; with ``--assignment``, a real master
from ``solutions/``, its submissions alternating between the solution and the blank exercise).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path

from tpp.grading.assign import exercise_text
from tpp.grading.example import CORRECT, WRONG, submission, write_demo_master
from tpp.grading.grade import GradeOptions, grade_folder, load_reference
from tpp.grading.notebook import parse_master

REPO = Path(__file__).resolve().parents[1]


def make_submissions(folder: Path, n: int, assignment: str | None, solutions: Path) -> Path:
    """Write ``n`` submissions into ``folder``; return the master's path."""
    rng = random.Random(0)
    folder.mkdir(parents=True)
    if assignment is None:
        master_path = write_demo_master(solutions)
        ex = json.loads(exercise_text(parse_master(master_path)))
        for k in range(n):
            answers = {cid: rng.choice((CORRECT[cid], WRONG[cid])) for cid in CORRECT}
            (folder / f"student{k:03d}.ipynb").write_text(json.dumps(submission(ex, answers)))
        return master_path
    master_path = REPO / "solutions" / f"{assignment}.ipynb"
    blank = exercise_text(parse_master(master_path))
    for k in range(n):
        text = master_path.read_text() if k % 2 == 0 else blank
        (folder / f"student{k:03d}.ipynb").write_text(text)
    return master_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=30)
    parser.add_argument("-j", "--jobs", type=int, default=2)
    parser.add_argument("--assignment", default=None)
    parser.add_argument("--compare", action="store_true",
                        help="also grade without the sandbox, in the same run")
    args = parser.parse_args()
    rates = {}
    for box in (True, False) if args.compare else (True,):
        rates[box] = run(args, box)
    if args.compare:
        print(f"sandbox cost: {rates[False] / rates[True]:.2f}x the unsandboxed throughput")


def run(args: argparse.Namespace, box: bool) -> float:

    tmp = Path(tempfile.mkdtemp(prefix="tpp-bench-grade-"))
    try:
        solutions = tmp / "solutions" if args.assignment is None else REPO / "solutions"
        subs = tmp / "submissions"
        master_path = make_submissions(subs, args.n, args.assignment, solutions)
        out = tmp / "results"
        options = GradeOptions(timeout=60, workers=args.jobs, sandbox=box,
                               cache_dir=tmp / "cache")
        # the master's reference run (once per assignment, then cached) is timed apart
        t0 = time.perf_counter()
        load_reference(parse_master(master_path), options.limits(), tmp / "cache")
        t_ref = time.perf_counter() - t0
        t0 = time.perf_counter()
        summary = grade_folder(
            subs, out, solutions=master_path.parent, assignment=master_path.stem, options=options
        )
        elapsed = time.perf_counter() - t0
        statuses = Counter(r["status"] for r in summary.rows)
        per_min = len(summary.graded_now) / elapsed * 60
        mean_row = sum(r["duration_s"] for r in summary.rows) / len(summary.rows)
        print(f"assignment: {master_path.stem}; submissions: {args.n}; workers: {args.jobs}; "
              f"sandbox: {'on' if summary.sandboxed else 'OFF'}")
        print(f"statuses: {dict(statuses)}")
        for r in summary.rows:
            if r["status"] != "graded":
                print(f"  {r['student']}: {r['status']}: {r['reason']}")
        print(f"reference run (once, cached): {t_ref:.2f} s")
        print(f"grading: {elapsed:.2f} s wall, {mean_row:.2f} s per submission in a worker")
        print(f"throughput: {per_min:.1f} submissions/minute (goal >= 100)")
        return per_min
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
