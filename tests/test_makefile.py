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
