"""The kernel's guard (:mod:`tpp.grading.guard`): submitted code cannot copy the answers.

Each submission below would earn the points of the question it attacks if the guard let the
attack through (it reads the master, the cached reference, or starts a program to do so), and
answers the other questions correctly. So each row is derived by hand: the attacked question
gets 0, the others their points. The demo master of :mod:`tpp.grading.example` lives in
``tmp_path``; attacks on the course repository itself only open files (never write to them),
and the test checks their bytes are unchanged afterwards.
"""

from __future__ import annotations

import dis
import hashlib
import json
import os
import tempfile
import types
from pathlib import Path

import pytest
import tpp
from tpp.grading import guard
from tpp.grading.assign import exercise_text
from tpp.grading.example import CORRECT, submission, write_demo_master
from tpp.grading.grade import GradeOptions, grade_folder
from tpp.grading.notebook import parse_master

pytestmark = pytest.mark.slow

FULL = {"q1": 2, "q2": 3, "q3": 1}
NO_Q1 = {"q1": 0, "q2": 3, "q3": 1}
NO_Q3 = {"q1": 2, "q2": 3, "q3": 0}
TPP_INIT = Path(tpp.__file__)
REPO_MASTER = TPP_INIT.resolve().parents[2] / "solutions" / "ex07_bubble.ipynb"

# exec the master's solution of a question, given the master's JSON text in _text
COPY = (
    "import json as _json\n"
    "_nb = _json.loads(_text)\n"
    "_src = next(c['source'] for c in _nb['cells'] if c.get('id') == {cid!r})\n"
    "exec(''.join(_src) if isinstance(_src, list) else _src)\n"
)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _attacks(master: Path) -> dict[str, dict[str, str]]:
    """name -> answer sources; the attacked question copies its answer from somewhere secret."""
    m = str(master)

    def q1(src: str) -> dict[str, str]:
        return {**CORRECT, "a-q1": src + COPY.format(cid="a-q1")}

    return {
        "correct": dict(CORRECT),
        # the master, by its path
        "read_master": q1(f"_text = open({m!r}).read()\n"),
        # the repository's masters, found through tpp.__file__: q3 is right only if readable
        "read_repo_master": {
            **CORRECT,
            "a-q3": "import tpp, pathlib\n"
            "_p = pathlib.Path(tpp.__file__).resolve().parents[2] / 'solutions'\n"
            "_text = (_p / 'ex07_bubble.ipynb').read_text()\n" + CORRECT["a-q3"],
        },
        # the grader's cached reference, found through the grading process's working folder
        # (os.readlink raises no audit event: the folder's name leaks, its files do not)
        "read_reference_via_proc": {
            **CORRECT,
            "a-q1": "import os, json\n"
            "_cwd = os.readlink(f'/proc/{os.getppid()}/cwd')\n"
            "_c = _cwd + '/results/.cache/'\n"
            "_ref = json.load(open(_c + 'reference-' + os.listdir(_c)[0][10:]))\n"
            "n_allreduce_fwd = _ref['values']['q1']['n_allreduce_fwd']['v']\n",
        },
        "read_cmdline_of_parent": q1(
            "import os\n"
            "_args = open(f'/proc/{os.getppid()}/cmdline').read()\n"
            f"_text = open({m!r}).read() if _args else ''\n"
        ),
        # writes: into the master (the tmp copy), into lib/tpp (opened only: never written)
        "write_master": {
            **CORRECT,
            "a-q3": f"open({m!r}, 'a').write(' ')\n" + CORRECT["a-q3"],
        },
        "write_tpp": {
            **CORRECT,
            "a-q3": f"_f = open({str(TPP_INIT)!r}, 'a')\n_f.close()\n" + CORRECT["a-q3"],
        },
        # other programs and native code doing the reading
        "subprocess_cat": q1(
            "import subprocess\n"
            f"_text = subprocess.run(['cat', {m!r}], capture_output=True, text=True).stdout\n"
        ),
        "os_system": q1(
            f"import os\nos.system('cat {m} > copy.json')\n_text = open('copy.json').read()\n"
        ),
        "ctypes_libc": q1(
            "import ctypes\n"
            f"ctypes.CDLL(None).system(b'cat {m} > copy.json')\n"
            "_text = open('copy.json').read()\n"
        ),
        "fork_exec": q1(
            "import os, multiprocessing.util as _u\n"
            f"_argv = [b'/bin/cp', {m.encode()!r}, b'copy.json']\n"
            "_pid = _u.spawnv_passfds(b'/bin/cp', _argv, ())\n"
            "os.waitpid(_pid, 0)\n_text = open('copy.json').read()\n"
        ),
        # getting around the checks: patched os.path, a symlink, a directory descriptor
        "patched_realpath": q1(
            "import os.path, posixpath\n"
            "os.path.realpath = posixpath.realpath = lambda p, **k: '/tmp/nothing'\n"
            "os.path.abspath = posixpath.abspath = lambda p: '/tmp/nothing'\n"
            f"_text = open({m!r}).read()\n"
        ),
        "symlink": q1(
            f"import os\nos.symlink({m!r}, 'link.json')\n_text = open('link.json').read()\n"
        ),
        "dir_fd": q1(
            "import os\n"
            f"_d = os.open({str(master.parent.parent)!r}, os.O_RDONLY)\n"
            f"_fd = os.open('solutions/{master.name}', os.O_RDONLY, dir_fd=_d)\n"
            "_text = os.read(_fd, 10**7).decode()\n"
        ),
        # other kernels' folders and sockets: their random names cannot be listed
        "list_tmp": q1(
            f"import os\n_names = os.listdir({tempfile.gettempdir()!r})\n"
            "_text = open(next(n for n in _names if n.startswith('tpp-grade-'))).read()\n"
        ),
        "gc_objects": q1(
            "import gc\n"
            "_text = next(o for o in gc.get_objects() if isinstance(o, str) and 'a-q1' in o)\n"
        ),
    }


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    root = tmp_path_factory.mktemp("guard")
    master = write_demo_master(root / "solutions")
    ex = json.loads(exercise_text(parse_master(master)))
    subs = root / "subs"
    subs.mkdir()
    for name, answers in _attacks(master).items():
        (subs / f"{name}.ipynb").write_text(json.dumps(submission(ex, answers)))
    before = {p: _sha(p) for p in (master, TPP_INIT, REPO_MASTER)}
    cwd = os.getcwd()
    os.chdir(root)  # the grading processes' working folder holds results/ (read via /proc)
    try:
        summary = grade_folder(
            subs,
            root / "results",
            solutions=root / "solutions",
            # the guard alone (the second layer): the OS sandbox would hide what it guards
            options=GradeOptions(timeout=10, workers=2, sandbox=False,
                                 cache_dir=root / "results" / ".cache"),
        )
    finally:
        os.chdir(cwd)
    rows = {r["student"]: r for r in summary.rows}
    return {"rows": rows, "before": before, "root": root}


def _expect(rows, name, points, refused=""):
    row = rows[name]
    assert (row["status"], row["points"]) == ("graded", points), row
    if refused:
        details = " ".join(q["detail"] for q in row["questions"].values())
        assert "the grader does not allow " + refused in details, details


def test_a_correct_submission_still_gets_full_marks(guarded):
    _expect(guarded["rows"], "correct", FULL)


def test_reading_the_master_earns_nothing(guarded):
    _expect(guarded["rows"], "read_master", NO_Q1, "reading")
    _expect(guarded["rows"], "read_repo_master", NO_Q3, "reading")
    detail = guarded["rows"]["read_master"]["questions"]["q1"]["detail"]
    # the refusal is named; the path (text the submission chose) is not echoed (issue 20)
    assert "the grader does not allow reading" in detail and "solutions/" not in detail, detail


def test_reading_the_cached_reference_through_proc_earns_nothing(guarded):
    _expect(guarded["rows"], "read_reference_via_proc", NO_Q1, "reading")
    detail = guarded["rows"]["read_reference_via_proc"]["questions"]["q1"]["detail"]
    assert "the grader does not allow reading" in detail and "results/.cache" not in detail, detail
    _expect(guarded["rows"], "read_cmdline_of_parent", NO_Q1, "reading")
    assert list((guarded["root"] / "results" / ".cache").glob("reference-*.json"))


def test_writing_into_the_master_or_the_library_fails_and_changes_nothing(guarded):
    _expect(guarded["rows"], "write_master", NO_Q3, "reading")  # refused before writing
    _expect(guarded["rows"], "write_tpp", NO_Q3, "writing")
    for path, sha in guarded["before"].items():
        assert _sha(path) == sha, path


@pytest.mark.parametrize(
    ("name", "refused"),
    [
        ("subprocess_cat", "starting processes: subprocess.Popen"),
        ("os_system", "starting processes: os.system"),
        ("ctypes_libc", "ctypes: ctypes.dlopen"),
        ("symlink", "creating links: os.symlink"),
        ("dir_fd", "opening the directory"),
        ("gc_objects", "gc.get_objects"),
        ("list_tmp", "listing"),
        ("patched_realpath", "reading"),
    ],
)
def test_other_programs_native_code_and_tricks_earn_nothing(guarded, name, refused):
    _expect(guarded["rows"], name, NO_Q1, refused)


def test_fork_exec_without_an_audit_event_is_stopped_by_seccomp(guarded):
    # _posixsubprocess.fork_exec raises no audit event; the exec fails (seccomp), no copy.json
    row = guarded["rows"]["fork_exec"]
    assert (row["status"], row["points"]) == ("graded", NO_Q1), row
    assert "FileNotFoundError" in row["questions"]["q1"]["detail"], row


# --- the hook itself ----------------------------------------------------------------------


def _code_objects(fn: types.FunctionType):
    todo = [fn.__code__]
    while todo:
        code = todo.pop()
        yield code
        todo += [c for c in code.co_consts if isinstance(c, types.CodeType)]


def test_the_hook_reads_no_global_and_keeps_no_mutable_state():
    """Patching the guard module, os or builtins from a cell cannot change the hook."""
    hook = guard.make_hook({"read": ["/nonexistent"]}, os.getpid(), "/tmp")
    funcs = [hook] + [d for d in hook.__defaults__ if isinstance(d, types.FunctionType)]
    assert len(funcs) >= 5
    for fn in funcs:
        assert fn.__closure__ is None and fn.__kwdefaults__ is None, fn
        for code in _code_objects(fn):
            ops = {i.opname for i in dis.get_instructions(code)}
            assert not ops & {"LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF", "LOAD_CLASSDEREF"}, (
                fn.__name__,
                code.co_name,
            )
        for value in fn.__defaults__ or ():
            assert not isinstance(value, (dict, list, set)), (fn.__name__, value)


def test_realpath_agrees_with_os_path_realpath(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("x")
    os.symlink(tmp_path / "d", tmp_path / "link")
    os.symlink("d/f", tmp_path / "rel")
    for p in [
        tmp_path / "link" / "f",
        tmp_path / "rel",
        tmp_path / "d" / ".." / "link" / "." / "f",
        tmp_path / "missing" / "x",
        Path("/proc/self/cwd"),
        Path("/"),
    ]:
        assert guard._realpath(str(p)) == os.path.realpath(p), p


def test_the_course_libraries_work_under_the_guard(tmp_path):
    """numpy, SymPy (which imports ctypes) and matplotlib (font cache, savefig) under the hook."""
    from tpp.grading.run import Limits, run_cells

    work = tmp_path / "work"
    work.mkdir()
    cells = [
        "import numpy as np, sympy as sp, tpp\n"
        "assert sp.Rational(1, 3) + 1 == sp.Rational(4, 3)\n"
        "assert float(np.linalg.norm(np.ones(4))) == 2.0",
        "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([1, 2])\n"
        "fig.savefig('f.png')\nimport tempfile\nopen(tempfile.mkstemp()[1], 'w').write('x')\n"
        "import os\nassert os.path.getsize('f.png') > 0",
        "open('/proc/self/status').read().count('Seccomp:\\t2') == 1 or 1 / 0",
    ]
    outcome = run_cells(cells, work, Limits(timeout=60))
    assert [c.status for c in outcome.cells] == ["ok", "ok", "ok"], outcome.cells
