"""Bounds per submission (issue 20), each exercised with small caps that cannot hurt the machine:
notebook size, cell count and source length before parsing; the kernel's disk on its own tmpfs;
one wall-clock budget per submission; a cap on kernel message size."""

from __future__ import annotations

import contextlib
import json
import math
import os

import pytest
from tpp.grading.assign import exercise_text
from tpp.grading.example import CORRECT, submission, write_demo_master
from tpp.grading.notebook import parse_master
from tpp.grading.reference import load_reference
from tpp.grading.rows import grade_submission
from tpp.grading.run import Limits
from tpp.grading.submission import Rejected, read_notebook


@pytest.fixture
def demo(tmp_path):
    path = write_demo_master(tmp_path / "solutions")
    master = parse_master(path)
    ex = json.loads(exercise_text(master))
    return {"master": master, "ex": ex, "root": tmp_path}


def _reference(demo):
    """The demo master's reference at ``Limits(timeout=15)``, in the run's shared cache
    (tests/conftest.py): computed once for every test here (and file) that grades with it."""
    return load_reference(demo["master"], Limits(timeout=15))


def _write(demo, name, answers):
    p = demo["root"] / f"{name}.ipynb"
    p.write_text(json.dumps(submission(demo["ex"], answers)))
    return p


@pytest.mark.parametrize(
    ("change", "words"),
    [("cells", "cells, more than"), ("source", "characters of source"), ("bytes", "MB")],
)
def test_a_notebook_too_large_is_refused_before_it_is_parsed(demo, change, words):
    nb = submission(demo["ex"], CORRECT)
    if change == "cells":
        nb["cells"] += [{"cell_type": "code", "source": "", "metadata": {}}] * 3000
    elif change == "source":
        nb["cells"].append({"cell_type": "code", "source": ["x = 1\n"] * 50_000, "metadata": {}})
    else:
        nb["metadata"]["pad"] = "x" * 2_000_000
    p = demo["root"] / "big.ipynb"
    p.write_text(json.dumps(nb))
    with pytest.raises(Rejected) as exc:
        read_notebook(p, max_bytes=1_000_000, max_cells=2000, max_source_chars=200_000)
    assert exc.value.status == "too-large" and words in exc.value.reason
    if change == "bytes":  # the same notebook within a larger cap is read
        assert read_notebook(p, max_bytes=5_000_000)["cells"]


FILL = (
    "import os\n"
    "written = 0\n"
    "try:\n"
    "    with open(os.path.join(os.path.dirname(os.getcwd()), 'fill'), 'wb') as fh:\n"
    "        for _ in range(64):\n"
    "            fh.write(b'x' * 2**20)\n"
    "            fh.flush()\n"
    "            written += 1\n"
    "except OSError:\n"
    "    pass\n"
    "os.remove(os.path.join(os.path.dirname(os.getcwd()), 'fill'))  # room for the answers\n"
    "n_allreduce_fwd = 1 if written < 20 else 0  # right only if the disk stopped it\n"
)


@pytest.mark.slow
@pytest.mark.skipif(os.getuid() != 0, reason="the shared folder's tmpfs needs root")
def test_the_kernels_shared_folder_is_a_small_tmpfs_not_the_host_disk(demo, bwrap):
    limits = Limits(timeout=15, disk_mb=16, guard=False)
    ref = load_reference(demo["master"], limits, demo["root"] / "cache")
    row = grade_submission(_write(demo, "filler", dict(CORRECT, **{"a-q1": FILL})),
                           demo["master"], ref, limits)  # fmt: skip
    assert row["status"] == "graded" and row["questions"]["q1"]["result"] == "correct", row


@pytest.mark.slow
def test_one_wall_clock_budget_per_submission(demo, bwrap, monkeypatch):
    """Each answer cell sleeps 2 s (under the cell timeout: 2 s more, scaled by the machine's
    load), so without one budget per submission all of them would run. With a 5 s budget at
    most 5 // 2 = 2 of them can have finished (a sleep takes at least its time, however busy
    the machine): the count of cells the kernel finished shows the bound without measuring
    time."""
    import tpp.grading.reference as reference
    from tpp.grading.run import startup_wait

    limits = Limits(timeout=2 + math.ceil(startup_wait(2)), budget_s=5)
    ref = _reference(demo)
    slow = {k: "import time\ntime.sleep(2)\n" + v for k, v in CORRECT.items()}
    seen = []
    real = reference.run_rebuilt
    monkeypatch.setattr(reference, "run_rebuilt",
                        lambda *a, **k: seen.append(real(*a, **k)) or seen[-1])  # fmt: skip
    row = grade_submission(_write(demo, "slow", slow), demo["master"], ref, limits)
    assert row["status"] == "timeout" and "time budget of 5 s" in row["reason"], row
    assert row["questions"]["q3"]["result"] == "timeout"  # never "not-run" (issue 20, load)
    assert "budget" in row["questions"]["q3"]["detail"], row
    rebuilt, outcome, _ = seen[0]
    finished = [i for i, c in enumerate(rebuilt.cells)
                if c.kind == "answer" and outcome.cells[i].status == "ok"]  # fmt: skip
    assert len(finished) <= int(limits.budget_s // 2) < len(slow), (finished, outcome.cells)


@pytest.mark.slow
def test_a_huge_kernel_message_is_refused_and_the_answers_still_count(demo, bwrap):
    limits = Limits(timeout=15, max_message_mb=1)
    ref = _reference(demo)
    loud = dict(CORRECT, **{"a-q1": "print('y' * 3_000_000)\n" + CORRECT["a-q1"]})
    row = grade_submission(_write(demo, "loud", loud), demo["master"], ref, limits)
    # the true reason, not "timeout": ZeroMQ dropped the message (and the connection)
    assert row["status"] == "message-too-large", row
    assert "over 1 MiB" in row["reason"] and "exceeded" not in row["reason"], row
    assert row["questions"]["q1"]["result"] in ("correct", "timeout"), row
    if row["questions"]["q1"]["result"] == "timeout":
        assert "over 1 MiB" in row["questions"]["q1"]["detail"], row
    assert row["questions"]["q2"]["result"] == "correct", row


MANY_FRAMES = (
    "k = get_ipython().kernel\n"
    "frame = b'z' * 2**20  # one 1 MiB buffer, sent 40 times: the kernel holds 1 MiB\n"
    "for _ in range({messages}):  # each message: 40 frames under the 4 MiB frame cap\n"
    "    k.session.send(k.iopub_socket, 'stream', {{'name': 'stdout', 'text': ''}},\n"
    "                   parent=k.get_parent(), buffers=[frame] * 40)\n"
)


@contextlib.contextmanager
def _rss_growth():
    """Sample this (the grader's) process's RSS every 2 ms while the block runs; yields a
    function giving the peak growth in bytes over the RSS at entry."""
    import threading

    import psutil

    me = psutil.Process()
    base = me.memory_info().rss
    peak, done = [base], threading.Event()

    def sample() -> None:
        while not done.wait(0.002):
            peak[0] = max(peak[0], me.memory_info().rss)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield lambda: peak[0] - base
    finally:
        done.set()
        sampler.join()


@pytest.mark.slow
def test_a_message_of_many_frames_each_under_the_cap_is_dropped_as_a_whole(demo, bwrap):
    """Before: ``--max-message-mb`` capped each ZeroMQ frame, so one validly signed IOPub
    message of 40 frames of 1 MiB (4 MiB cap) reached the grader whole (40 MiB, copied and
    deserialised). Now the client's channel counts a message's frames as they arrive and
    releases them past the cap: the row says ``message-too-large``, the honest answers count,
    and the grader's Python heap never holds such a message (tracemalloc's peak, exact: the
    frames are libzmq's until copied). The grader's RSS (sampled with psutil) is printed, not
    asserted: libzmq itself queues whole messages while the grader is not reading, for as
    long as a busy machine makes that (the instructors' page gives that bound)."""
    import tracemalloc

    messages = 8
    sent = messages * 40 * 2**20
    limits = Limits(timeout=15, max_message_mb=4, relay=False)  # the grader's own channels
    ref = _reference(demo)
    cell = MANY_FRAMES.format(messages=messages) + CORRECT["a-q1"]
    path = _write(demo, "frames", dict(CORRECT, **{"a-q1": cell}))
    tracemalloc.start()
    try:
        with _rss_growth() as growth_of:
            row = grade_submission(path, demo["master"], ref, limits)
        heap_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    growth = growth_of()
    print(f"sent {sent / 2**20:.0f} MiB; grader RSS growth {growth / 2**20:.0f} MiB; "
          f"Python heap peak {heap_peak / 2**20:.1f} MiB")  # fmt: skip
    assert row["status"] == "message-too-large" and "over 4 MiB" in row["reason"], row
    assert row["questions"]["q1"]["result"] in ("correct", "timeout"), row
    assert row["questions"]["q2"]["result"] == "correct", row
    assert row["questions"]["q3"]["result"] == "correct", row
    assert heap_peak < 2 * limits.max_message_mb * 2**20, heap_peak  # never one 40 MiB message


@pytest.mark.slow
def test_a_kernel_that_closes_its_own_socket_is_not_reported_as_a_huge_message(demo, bwrap):
    """Another attack of the family: an answer cell that closes its kernel's shell socket. The
    grader's side saw a disconnection and the row said "a message over 16 MiB was dropped"
    (``message-too-large``), which was false; now a disconnection followed by failed
    reconnections (the endpoint is gone) is not counted: that question times out, the others
    count."""
    from tpp.grading.run import startup_wait

    # the closed socket makes q1 wait out its timeout: a short one, scaled by the machine's load
    # (the other cells are the demo's few lines); the kernel is then restarted for q2 and q3
    limits = Limits(timeout=math.ceil(startup_wait(4)))
    ref = _reference(demo)
    closer = dict(CORRECT, **{"a-q1": "get_ipython().kernel.shell_stream.socket.close()\n"
                                      + CORRECT["a-q1"]})  # fmt: skip
    row = grade_submission(_write(demo, "closer", closer), demo["master"], ref, limits)
    assert row["status"] != "message-too-large", row
    assert "MiB" not in row["reason"], row
    assert row["questions"]["q1"]["result"] in ("timeout", "kernel-died"), row
    assert row["questions"]["q2"]["result"] == "correct", row
    assert row["questions"]["q3"]["result"] == "correct", row


def test_many_untagged_cells_do_not_cost_a_parse_each(demo):
    """A notebook at the caps whose cells have no ids or tags: the fallback that finds an
    answer cell by its variables parses only cells naming them (here: none)."""
    from tpp.grading.submission import answer_sources

    nb = {"cells": [{"cell_type": "code", "source": "x = 1\n" * 800} for _ in range(2000)]}
    calls = []
    import tpp.grading.submission as sub

    real = sub.assigned_names
    sub.assigned_names = lambda src: calls.append(1) or real(src)
    try:
        found, _ = answer_sources(nb, demo["master"])
    finally:
        sub.assigned_names = real
    assert found == {} and len(calls) <= len(demo["master"].cells)  # the master's own only


@pytest.mark.slow
def test_numpy_imports_at_600_mib_of_address_space(bwrap, tmp_path):
    """Before: a kernel at ``--memory-mb 600`` could not import numpy (the stale-reference
    finding): glibc's per-thread malloc arenas put an idle kernel at ~745 MiB of address
    space. With at most 2 arenas it holds ~290 MiB, and numpy imports under RLIMIT_AS alone."""
    from tpp.grading.run import run_cells, startup_wait

    (tmp_path / "work").mkdir()
    out = run_cells(["import numpy\nassert numpy.ones(3).sum() == 3"], tmp_path / "work",
                    Limits(timeout=startup_wait(30), memory_mb=600, cgroup=""))  # fmt: skip
    assert out.cells[0].status == "ok", (out.cells[0], out.reason)


DISK_FILL = (
    "import os\n"
    "shared = os.path.dirname(os.getcwd())\n"
    "for k in range(64):\n"
    "    with open(os.path.join(shared, f'fill{k}'), 'wb') as fh:\n"
    "        fh.write(b'x' * 2**20)\n"
    "n_allreduce_fwd = 1\n"
)


@pytest.mark.slow
def test_a_kernel_filling_a_shared_folder_on_the_host_disk_gets_a_disk_limit_row(
    demo, bwrap, monkeypatch
):
    """Without root the shared folder cannot be a tmpfs (as here when the mount is refused):
    a watchdog bounds it, kills the filling sandbox, deletes its files; the row says
    ``disk-limit`` and an honest student graded next is unaffected."""
    import tpp.grading.bounds as bounds

    monkeypatch.setattr(bounds, "mount_tmpfs", lambda path, size_mb: False)  # as unprivileged
    limits = Limits(timeout=15, disk_mb=16, guard=False)
    ref = load_reference(demo["master"], limits, demo["root"] / "cache")
    row = grade_submission(_write(demo, "filler", dict(CORRECT, **{"a-q1": DISK_FILL})),
                           demo["master"], ref, limits)  # fmt: skip
    assert row["status"] == "disk-limit" and "16 MiB" in row["reason"], row
    assert row["questions"]["q1"]["points"] == 0, row  # 64 MiB never got written
    assert row["questions"]["q2"]["result"] == "correct", row  # the other questions count
    honest = grade_submission(_write(demo, "honest", CORRECT), demo["master"], ref, limits)
    assert honest["status"] == "graded" and honest["total"] == honest["max"], honest


WRITER = (  # the sandbox's last process: it outlives the kill for ~1.2 s, writing every 0.1 s
    "import sys, time\n"
    "for k in range(12):\n"
    "    with open(f'{sys.argv[1]}/w{k}', 'wb') as fh:\n"
    "        fh.write(b'x' * 2**20)\n"
    "    time.sleep(0.1)\n"
)
SLOW_TO_DIE = (  # the sandbox: starts the writer, then waits to be killed
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', sys.argv[1], sys.argv[2]])\n"
    "time.sleep(600)\n"
)


def test_disk_watch_settles_only_after_the_killed_sandboxs_processes_have_ended(tmp_path):
    """Before: ``settle`` stopped purging once two looks 50 ms apart agreed, and on a busy
    machine a kernel still dying (the kill reaches it through ``--die-with-parent`` and the PID
    namespace's teardown) wrote more after that: the next attempt on the folder started over
    the limit and an honest question came back ``kernel-died`` (CI on c9d56a4, a full
    ``make test`` on 7045b41). Here the sandbox's last process outlives the kill by ~1.2 s and
    writes every 0.1 s; after ``settle`` the folder must stay empty."""
    import subprocess
    import sys

    import psutil
    import tpp.grading.bounds as bounds

    folder = tmp_path / "shared"
    folder.mkdir()
    sandbox = subprocess.Popen([sys.executable, "-c", SLOW_TO_DIE, WRITER, str(folder)])
    watch = bounds.DiskWatch(folder, disk_mb=1)
    watch.pid = sandbox.pid
    try:
        sandbox.wait(timeout=120)  # killed by the watchdog once the folder passes 1 MiB
        assert watch.hit
        victims = list(watch._victims)
        watch.settle()
    finally:
        watch.close()
    assert len(victims) == 2, victims  # the sandbox and its writer, seen at the kill
    writer = victims[1]
    try:
        writer.wait(timeout=120)  # the writer has ended (settle waited for it)
    except psutil.NoSuchProcess:
        pass
    assert sorted(p.name for p in folder.iterdir()) == []


def test_the_instructors_page_documents_every_bound_and_status():
    """Each status a row can have, and each bound option of ``tpp grade``, has its line in
    the instructors' page (option, default, what happens when exceeded)."""
    import argparse
    from pathlib import Path

    from tpp import cli
    from tpp.grading.grade import STATUSES

    page = (Path(__file__).resolve().parents[1] / "chapters" / "instructors.md").read_text()
    table = {line.split("|")[1].strip() for line in page.splitlines() if line.startswith("| `")}
    missing = [s for s in STATUSES if f"`{s}`" not in table]
    assert not missing, f"statuses without a row in the page's table: {missing}"
    parser = cli.build_parser()
    grade = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    opts = [o for a in grade.choices["grade"]._actions for o in a.option_strings
            if a.dest in ("budget", "disk_mb", "nproc", "cpus", "cgroups", "max_message_mb",
                          "max_notebook_mb", "max_cells", "max_source_chars", "memory_mb",
                          "cpu_seconds", "timeout") and o.startswith("--")]  # fmt: skip
    assert len(opts) >= 12
    undocumented = [o for o in opts if not any(cell.startswith((f"`{o} ", f"`{o}`"))
                                               or f"`{o}`" in cell for cell in table)]  # fmt: skip
    assert not undocumented, f"bound options without a row in the page's table: {undocumented}"


def test_an_answer_cell_whose_source_is_a_million_numbers_is_named_not_missing(demo):
    """Another attack of the family: valid notebook JSON whose answer cell's source is a list
    of 10**6 numbers (not text). It is refused cheaply and the row says why (before: "no
    answer cell for q1", although the cell was there); a list of 10**6 empty strings is
    text and is read as such."""
    from tpp.grading.submission import answer_sources, read_notebook

    nb = submission(demo["ex"], CORRECT)
    for cell in nb["cells"]:
        if cell.get("id") == "a-q1":
            cell["source"] = [0] * 10**6
        if cell.get("id") == "a-q3":
            cell["source"] = [CORRECT["a-q3"]] + [""] * 10**6
    path = demo["root"] / "numbers.ipynb"
    path.write_text(json.dumps(nb))
    found, warnings = answer_sources(read_notebook(path, max_source_chars=200_000), demo["master"])
    assert "a-q1" not in found
    assert any(w.startswith("q1:") and "not text" in w for w in warnings), warnings
    assert found["a-q3"] == CORRECT["a-q3"] and found["a-q2"] == CORRECT["a-q2"]


@pytest.mark.slow
def test_grading_many_submissions_does_not_run_out_of_file_descriptors(demo, bwrap):
    """Before: each graded submission left its kernel client's and manager's ZeroMQ contexts
    open (~28 descriptors: I/O threads' epolls and eventfds), and a long run or test session
    met EMFILE ("Too many open files", CI on 1d0dda8). Now a fourth submission leaves the
    process with as many descriptors as the first did (a few of slack for transient ones)."""
    limits = Limits(timeout=15)
    ref = _reference(demo)
    counts = []
    for k in range(4):
        row = grade_submission(_write(demo, f"s{k}", CORRECT), demo["master"], ref, limits)
        assert row["total"] == row["max"], row
        counts.append(len(os.listdir("/proc/self/fd")))
    assert counts[-1] - counts[0] <= 6, counts  # the old code: +28 per submission


ONE_MESSAGE = (
    "k = get_ipython().kernel\n"
    "frame = b'z' * 2**20  # one 1 MiB buffer sent 300 times: the kernel holds 1 MiB of it\n"
    "k.session.send(k.iopub_socket, 'stream', {'name': 'stdout', 'text': ''},\n"
    "               parent=k.get_parent(), buffers=[frame] * 300)\n"
)


@pytest.mark.slow
def test_one_message_of_300_frames_never_reaches_the_grader_process(demo, bwrap):
    """Before: libzmq makes a multipart message readable only once its last frame arrived, so
    ONE validly signed IOPub message of 300 frames of 1 MiB (each under the 4 MiB frame cap)
    was held whole in the grader's own process (~300 MiB of RSS; unbounded in the frame
    count). Now the kernel's sockets are read by a relay process with its own memory limit
    (``tpp.grading.relay``): the relay dies holding it, the grader's RSS (sampled with psutil,
    the grader process only) grows far less than the message, the row says
    ``message-too-large`` and the other answers count."""
    limits = Limits(timeout=15, max_message_mb=4, relay=True)
    ref = _reference(demo)
    path = _write(demo, "one", dict(CORRECT, **{"a-q1": ONE_MESSAGE + CORRECT["a-q1"]}))
    with _rss_growth() as growth_of:
        row = grade_submission(path, demo["master"], ref, limits)
    growth = growth_of()
    print(f"sent one message of 300 MiB; grader RSS growth {growth / 2**20:.0f} MiB")
    assert growth < 150 * 2**20, growth / 2**20  # the old code: ~300 MiB
    assert row["status"] == "message-too-large" and "over 4 MiB" in row["reason"], row
    assert row["questions"]["q1"]["result"] in ("timeout", "kernel-died"), row
    assert row["questions"]["q2"]["result"] == "correct", row
    assert row["questions"]["q3"]["result"] == "correct", row
