"""The Makefile's set-up: the interpreter is checked before .venv is made, and a .venv that is
broken or was made by another interpreter is recreated with a message saying why.

Runs `make venv` in a scratch folder (a copy of the Makefile and pyproject.toml) with stub
interpreters, so nothing is installed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# A stub "python": answers the version check, reports a base prefix, and makes a stub .venv
# whose python runs pip (and everything else) as a no-op.
STUB = """#!/bin/sh
case "$*" in
  *"sys.version_info < (3, 11)"*) exit {old} ;;
  *base_prefix*) echo "{prefix}" ;;
  "-m venv .venv")
    mkdir -p .venv/bin
    printf '#!/bin/sh\\ncase "$*" in *base_prefix*) echo "{prefix}";; esac\\nexit 0\\n' \\
      > .venv/bin/python
    chmod +x .venv/bin/python ;;
esac
exit 0
"""


def _python(tmp: Path, name: str, old: int = 0, prefix: str = "/opt/py") -> Path:
    path = tmp / name
    path.write_text(STUB.format(old=old, prefix=prefix))
    path.chmod(0o755)
    return path


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


def _make(folder: Path, python: Path | str) -> subprocess.CompletedProcess:
    # EXTRAS fixed on the command line: CI exports EXTRAS=dev,torch, which names another stamp
    return subprocess.run(["make", "venv", f"PYTHON={python}", "EXTRAS=dev"], cwd=folder,
                          capture_output=True, text=True, timeout=60)


def test_an_old_python_is_refused_with_a_message(scratch):
    out = _make(scratch, _python(scratch, "py310", old=1))
    assert out.returncode != 0
    assert "is not Python >= 3.11" in out.stdout + out.stderr
    assert not (scratch / ".venv").exists()


def test_a_broken_venv_is_recreated(scratch):
    (scratch / ".venv" / "bin").mkdir(parents=True)
    (scratch / ".venv" / "bin" / "python").write_text("#!/bin/sh\nexit 1\n")
    (scratch / ".venv" / "bin" / "python").chmod(0o755)
    out = _make(scratch, _python(scratch, "py311"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert ".venv is broken" in out.stdout
    assert (scratch / ".venv" / ".installed-dev").exists()


def test_a_venv_of_another_interpreter_is_recreated(scratch):
    first = _make(scratch, _python(scratch, "py311", prefix="/opt/py311"))
    assert first.returncode == 0, first.stdout + first.stderr
    (scratch / "pyproject.toml").touch()          # make the stamp out of date
    out = _make(scratch, _python(scratch, "py312", prefix="/opt/py312"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "made by another interpreter" in out.stdout


def test_the_real_interpreter_passes_the_check():
    check = "import sys; sys.exit(sys.version_info < (3, 11))"
    assert subprocess.run([sys.executable, "-c", check]).returncode == 0


def _dry_run(folder: Path, python: Path, *args: str) -> str:
    out = subprocess.run(["make", "-n", *args, f"PYTHON={python}"], cwd=folder,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


@pytest.mark.parametrize("extras", ["dev", "dev,torch", "torch,dev"])
def test_make_book_installs_the_torch_extra_and_requires_it(scratch, extras):
    """The site must show chapter 12's and 18's torch results: `make book` installs the torch
    extra (torch==2.13.0, the CPU build) whatever EXTRAS says, once, and tells the chapters that
    torch is required (a missing torch fails the build instead of printing a placeholder)."""
    plan = _dry_run(scratch, _python(scratch, "py311"), "book", f"EXTRAS={extras}")
    installs = [line for line in plan.splitlines() if "pip install" in line and " -e " in line]
    assert len(installs) == 1, plan
    wanted = set(extras.split(",")) | {"torch"}
    spec = installs[0].split('".[', 1)[1].split("]", 1)[0]
    assert sorted(spec.split(",")) == sorted(wanted), installs[0]
    build = [line for line in plan.splitlines() if "jupyter-book build" in line]
    assert build and all("TPP_REQUIRE_TORCH=1" in line for line in build), plan


def test_the_torch_extra_pins_the_cpu_wheel():
    """An unpinned torch pulls a multi-GB CUDA build; the pin takes the CPU wheel."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["optional-dependencies"]["torch"] == ["torch==2.13.0"]


def test_make_venv_installs_only_the_extras_asked_for(scratch):
    plan = _dry_run(scratch, _python(scratch, "py311"), "venv", "EXTRAS=dev")
    assert '-e ".[dev]"' in plan and "torch" not in plan, plan


def test_the_git_filter_keeps_cell_ids(scratch):
    """`make hooks` strips outputs on staging but keeps cell ids (the grader matches answer
    cells by id; renumbered ids would also conflict in every merge)."""
    import json

    plan = _dry_run(scratch, _python(scratch, "py311"), "hooks", "EXTRAS=dev")
    clean = [ln for ln in plan.splitlines() if "filter.nbstripout.clean" in ln]
    assert clean, plan
    command = clean[0].split("filter.nbstripout.clean", 1)[1].split("&&")[0].strip().strip('"')
    nbstripout = ROOT / ".venv" / "bin" / "nbstripout"
    if not nbstripout.exists():
        pytest.skip("nbstripout is not installed in .venv")
    args = [str(nbstripout), *command.split()[1:], "-t"]
    chapter = ROOT / "chapters" / "01_collectives.ipynb"
    out = subprocess.run(args, stdin=chapter.open("rb"), capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    ids = [c["id"] for c in json.loads(chapter.read_text())["cells"]]
    assert [c["id"] for c in json.loads(out.stdout)["cells"]] == ids
