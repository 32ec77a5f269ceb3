"""The ``tpp`` command line: ``tpp assign [--check]``, ``tpp grade SUBMISSIONS --out RESULTS``,
``tpp check NOTEBOOK``, ``tpp demo``.

At the top level of :mod:`tpp` because it belongs to no one part: it dispatches to the grader
(:mod:`tpp.grading`) and to the serving lesson's demo (:mod:`tpp.serving.demo`), importing each
only when its command runs (``pyproject.toml``: ``tpp = "tpp.cli:main"``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _course_root(start: Path) -> Path:
    """The nearest folder at or above ``start`` that holds ``solutions/`` (else ``start``)."""
    for d in (start, *start.parents):
        if (d / "solutions").is_dir():
            return d
    return start


def _cmd_assign(args: argparse.Namespace) -> int:
    from tpp.grading.assign import assign, check
    from tpp.grading.notebook import MasterError

    root = _course_root(Path.cwd())
    solutions = Path(args.solutions) if args.solutions else root / "solutions"
    exercises = Path(args.exercises) if args.exercises else root / "exercises"
    if not solutions.is_dir():
        print(f"tpp assign: no folder {solutions}: pass --solutions DIR", file=sys.stderr)
        return 2
    try:
        if args.roster:
            from tpp.grading.assign import assign_roster

            if not args.out:
                print("tpp assign --roster: pass --out DIR for the released notebooks",
                      file=sys.stderr)  # fmt: skip
                return 2
            written = assign_roster(solutions, args.roster, args.out)
            print(f"wrote {len(written)} notebooks (one per student and assignment) to {args.out}")
            return 0
        if args.check:
            drift = check(solutions, exercises)
            if drift:
                print(
                    f"tpp assign --check: {exercises} is out of date; run 'tpp assign':\n"
                    + drift.describe(),
                    file=sys.stderr,
                )
                return 1
            print(f"tpp assign --check: {exercises} is up to date")
            return 0
        changed = assign(solutions, exercises)
    except MasterError as exc:
        print(f"tpp assign: invalid master: {exc}", file=sys.stderr)
        return 2
    except (ValueError, OSError) as exc:
        print(f"tpp assign: {exc}", file=sys.stderr)
        return 2
    for name in changed:
        print(f"wrote {exercises / name}" if "(removed)" not in name else f"removed {name}")
    if not changed:
        print(f"{exercises} already up to date")
    return 0


def _find_solutions(given: str | None) -> Path:
    """``--solutions``, else ``solutions/`` of the course around the working folder, else of the
    course the ``tpp`` package belongs to; ``FileNotFoundError`` naming what was looked for."""
    if given:
        path = Path(given)
        if not path.is_dir():
            raise FileNotFoundError(f"--solutions {given}: no such folder")
        return path
    import tpp

    looked = []
    for start in (Path.cwd(), Path(tpp.__file__).resolve().parent):
        for d in (start, *start.parents):
            looked.append(d / "solutions")
            if (d / "solutions").is_dir():
                return d / "solutions"
    raise FileNotFoundError(
        "no solutions/ folder found (looked in the working folder, the folders above it and "
        "above the tpp package): pass --solutions DIR"
    )


def _cmd_grade(args: argparse.Namespace) -> int:
    from tpp.grading.grade import GradeOptions, grade_folder
    from tpp.grading.notebook import MasterError

    try:
        solutions = _find_solutions(args.solutions)
    except FileNotFoundError as exc:
        print(f"tpp grade: {exc}", file=sys.stderr)
        return 2
    options = GradeOptions(
        timeout=args.timeout,
        workers=args.jobs,
        force=args.force,
        memory_mb=args.memory_mb,
        cpu_seconds=args.cpu_seconds,
        guard=not args.no_guard,
        allow_unsandboxed=args.unsandboxed,
        budget_s=args.budget,
        disk_mb=args.disk_mb,
        nproc=args.nproc,
        cpus=args.cpus,
        cgroups=args.cgroups,
        max_message_mb=args.max_message_mb,
        max_notebook_mb=args.max_notebook_mb,
        max_cells=args.max_cells,
        max_source_chars=args.max_source_chars,
    )
    try:
        summary = grade_folder(
            Path(args.submissions),
            Path(args.out),
            solutions=solutions,
            assignment=args.assignment,
            options=options,
            progress=None if args.quiet else print,
        )
    except (MasterError, ValueError, FileNotFoundError) as exc:
        print(f"tpp grade: {exc}", file=sys.stderr)
        return 2
    if not args.quiet:
        print(summary.describe())
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    """A learner's pre-submission check: answer cells in place, public checks run."""
    from tpp.grading.selfcheck import CheckError, check_notebook

    status = 0
    for notebook in args.notebooks:
        try:
            report = check_notebook(notebook, course=args.course, timeout=args.timeout)
        except CheckError as exc:
            print(f"tpp check: {exc}", file=sys.stderr)
            status = max(status, 2)
            continue
        print(f"tpp check {notebook}")
        print(report.describe())
        if not report.ok:
            status = max(status, 1)
    return status


def _cmd_demo(args: argparse.Namespace) -> int:
    from tpp.serving.demo import run_demo

    result = run_demo()
    ok = (all(result.ranks_bitwise_equal.values()) and result.gqa_error != ""
          and max(result.rel_error.values()) < 1e-12)
    return 0 if ok else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tpp", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    pa = sub.add_parser("assign", help="regenerate exercises/ from the masters in solutions/")
    pa.add_argument("--check", action="store_true", help="only check; exit 1 if out of date")
    pa.add_argument("--solutions", help="folder of master notebooks (default: ./solutions)")
    pa.add_argument("--exercises", help="folder of generated notebooks (default: ./exercises)")
    pa.add_argument("--roster", help="release one notebook per student: a CSV with a column "
                    "'id' (or one id per line); their id is stamped in each notebook, so its "
                    "numbers are theirs and tpp check and tpp grade use the same id")
    pa.add_argument("--out", help="with --roster: the folder for the released notebooks")
    pa.set_defaults(func=_cmd_assign)

    pg = sub.add_parser("grade", help="grade a folder of submitted notebooks")
    pg.add_argument(
        "submissions",
        help="folder of submitted *.ipynb (one per student), or of one folder per student, "
        "or a .zip of either (as learning platforms export); the student id is the file or "
        "folder name",
    )
    pg.add_argument("--out", required=True, help="results folder (gradebook.csv, feedback/, ...)")
    pg.add_argument("-j", "--jobs", type=int, default=1, help="parallel kernels (default 1)")
    pg.add_argument("--timeout", type=float, default=30.0, help="seconds per cell (default 30)")
    pg.add_argument("--force", action="store_true", help="regrade students already graded")
    pg.add_argument("--assignment", help="assignment id (default: inferred from the notebooks)")
    pg.add_argument("--solutions", help="folder of master notebooks (default: ./solutions)")
    pg.add_argument(
        "--memory-mb", type=int, default=2048,
        help="memory of a sandbox (cgroup), else address space of each kernel process (MiB)",
    )
    pg.add_argument(
        "--cpu-seconds", type=int, default=120, help="CPU-time limit of a kernel (seconds)"
    )
    bound = pg.add_argument_group("bounds per submission (see the instructors' page)")
    bound.add_argument("--budget", type=float, default=600.0,
                       help="wall-clock seconds per submission, kernel restarts and replays "
                       "included (default 600)")  # fmt: skip
    bound.add_argument("--disk-mb", type=int, default=256,
                       help="size of each writable filesystem of a kernel: its shared folder "
                       "and work folder, each a tmpfs (default 256)")  # fmt: skip
    bound.add_argument("--nproc", type=int, default=64,
                       help="processes + threads of a sandbox (default 64)")
    bound.add_argument("--cpus", type=float, default=1.0,
                       help="CPU cores of a sandbox (cgroup quota; default 1)")
    bound.add_argument("--cgroups", action=argparse.BooleanOptionalAction, default=True,
                       help="bound memory, processes and CPU of the whole sandbox with a cgroup "
                       "(v2, else v1; root only; default on where writable)")  # fmt: skip
    bound.add_argument("--max-message-mb", type=int, default=16,
                       help="largest message frame accepted from a kernel (default 16)")
    bound.add_argument("--max-notebook-mb", type=float, default=10.0,
                       help="largest submission file read (default 10)")
    bound.add_argument("--max-cells", type=int, default=2000,
                       help="most cells a submission may have (default 2000)")
    bound.add_argument("--max-source-chars", type=int, default=200_000,
                       help="longest cell source of a submission (default 200000)")
    pg.add_argument(
        "--no-guard",
        action="store_true",
        help="run kernels without the in-kernel guard (only inside a container you trust; "
        "see the instructors' page)",
    )
    pg.add_argument(
        "--unsandboxed",
        action="store_true",
        help="grade even where the OS sandbox (bubblewrap) cannot run, with the in-kernel guard "
        "only: not for credit (see the instructors' page)",
    )
    pg.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")
    pg.set_defaults(func=_cmd_grade)

    pc = sub.add_parser(
        "check",
        help="before submitting: are the answer cells in place, and do the public checks pass?",
    )
    pc.add_argument("notebooks", nargs="+", help="your exercise notebook(s)")
    pc.add_argument("--course", help="the course folder (default: found from the notebook)")
    pc.add_argument("--timeout", type=float, default=120.0, help="seconds per cell (default 120)")
    pc.set_defaults(func=_cmd_check)

    pd = sub.add_parser("demo", help="the serving lesson's 'run it locally' program (NumPy only)")
    pd.set_defaults(func=_cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
