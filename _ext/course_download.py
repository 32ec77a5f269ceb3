"""The course as one download, for a reader who has only the website.

``make book`` (any HTML build of the book) writes ``_build/html/tpp-course.zip``:

    tpp-course/README.txt                   the two lines below, and what they do
    tpp-course/tpp-<version>-py3-none-any.whl   the library, built from lib/ at this build
    tpp-course/chapters/NN_*.ipynb           the chapters (outputs stripped: run them)
    tpp-course/exercises/exNN_*.ipynb        the graded exercises, as learners get them

and the directive ``{tpp-course-download}`` links it (from any page) with the two lines that install
and open it. Nothing here needs the network except ``pip`` fetching the wheel's dependencies.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import tomllib
import zipfile
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import Directive

ZIP_NAME = "tpp-course.zip"
FOLDER = "tpp-course"
FIRST_CHAPTER = "chapters/01_collectives.ipynb"


def wheel_name(root: Path) -> str:
    """The file name of the ``tpp`` wheel that :func:`build_wheel` makes (PEP 427)."""
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return f"{project['name']}-{project['version']}-py3-none-any.whl"


def install_lines(root: Path) -> list[str]:
    """The two shell lines: a venv with tpp, JupyterLab and widgets; JupyterLab on chapter 1."""
    return [
        f'python3 -m venv .venv && .venv/bin/python -m pip install "./{wheel_name(root)}[lab]"',
        f".venv/bin/jupyter lab {FIRST_CHAPTER}",
    ]


def notebooks(root: Path) -> dict[str, list[Path]]:
    """The notebooks a learner runs: every chapter and every generated exercise."""
    return {
        "chapters": sorted((root / "chapters").glob("*.ipynb")),
        "exercises": sorted((root / "exercises").glob("*.ipynb")),
    }


def build_wheel(root: Path, dest: Path) -> Path:
    """Build the ``tpp`` wheel from a copy of the project (no ``build/`` left in the tree)."""
    with tempfile.TemporaryDirectory(prefix="tpp-wheel-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            if (root / name).exists():
                shutil.copy(root / name, src / name)
        shutil.copytree(root / "lib", src / "lib",
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc"))
        cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(dest)]
        try:   # setuptools at hand: no isolated build environment to fetch
            import setuptools  # noqa: F401
            import wheel  # noqa: F401

            cmd.append("--no-build-isolation")
        except ImportError:
            pass
        run = subprocess.run([*cmd, str(src)], capture_output=True, text=True)
        if run.returncode != 0:
            raise RuntimeError(f"building the tpp wheel failed:\n{run.stdout}\n{run.stderr}")
    built = dest / wheel_name(root)
    if not built.is_file():
        raise RuntimeError(f"pip wheel made {sorted(p.name for p in dest.iterdir())}, "
                           f"not {built.name}: check [project] name and version")
    return built


def _stripped(path: Path) -> str:
    """The notebook without outputs or execution counts (a learner runs it)."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def readme(root: Path) -> str:
    lines = install_lines(root)
    return (
        "Tensor & Pipeline Parallelism, derived: the course's notebooks and its library tpp.\n\n"
        "With Python 3.11 or newer, in this folder:\n\n"
        f"    {lines[0]}\n    {lines[1]}\n\n"
        "The first line makes a Python environment in .venv with tpp, JupyterLab and the\n"
        "widgets (pip downloads numpy, sympy, matplotlib and JupyterLab); the second opens the\n"
        "first chapter. chapters/ holds every chapter, exercises/ the graded exercises: fill in\n"
        "the cells marked '# YOUR CODE HERE', run the check cell under each question, and run\n"
        "'.venv/bin/tpp check exercises/<file>.ipynb' before you submit one.\n"
        "On Windows, use .venv\\Scripts\\python and .venv\\Scripts\\jupyter.\n"
    )


def wheel_key(root: Path) -> str:
    """A hash of what the wheel is built from: pyproject.toml, README.md, LICENSE, lib/."""
    h = hashlib.sha256()
    files = [root / n for n in ("pyproject.toml", "README.md", "LICENSE")]
    files += sorted(p for p in (root / "lib").rglob("*") if p.is_file()
                    and "__pycache__" not in p.parts and ".egg-info" not in str(p)
                    and p.suffix != ".pyc")
    for path in files:
        if path.exists():
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:20]


def cached_wheel(root: Path, store: Path) -> Path:
    """The wheel of this version of the library: built once (:func:`build_wheel`) into
    ``store/<hash>/`` and reused by every later build until pyproject.toml, README.md, LICENSE
    or lib/ change (a warm rebuild of the book then skips pip)."""
    folder = store / wheel_key(root)
    wheel = folder / wheel_name(root)
    if wheel.is_file():
        return wheel
    shutil.rmtree(store, ignore_errors=True)  # one version kept
    partial = store / f"{folder.name}.partial"
    partial.mkdir(parents=True)
    build_wheel(root, partial)
    partial.rename(folder)
    return wheel


def pack(root: Path, out: Path, wheel_store: Path | None = None) -> Path:
    """Write the course's zip to ``out`` (see the module's docstring for its contents); with
    ``wheel_store``, the wheel comes from :func:`cached_wheel`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tpp-course-") as tmp:
        wheel = (cached_wheel(root, wheel_store) if wheel_store is not None
                 else build_wheel(root, Path(tmp)))
        partial = out.with_suffix(".partial")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr(f"{FOLDER}/README.txt", readme(root))
            zf.write(wheel, f"{FOLDER}/{wheel.name}")
            for folder, paths in notebooks(root).items():
                for path in paths:
                    zf.writestr(f"{FOLDER}/{folder}/{path.name}", _stripped(path))
        partial.replace(out)
    return out


def _wheel_store(app) -> Path:
    return Path(app.outdir).parent / ".tpp_wheel"


_BACKGROUND: dict[str, threading.Thread] = {}
_FAILED: dict[str, BaseException] = {}


def start_wheel(app) -> None:
    """``builder-inited``: build the wheel (:func:`cached_wheel`) in a thread while Sphinx
    reads and the chapters execute, unless this version of the library has one stored; pip runs
    as a subprocess, so the thread mostly waits. :func:`write_course_zip` waits for it."""
    if app.builder.format != "html" or app.builder.name == "singlehtml":
        return
    root, store = Path(app.srcdir), _wheel_store(app)
    if (store / wheel_key(root) / wheel_name(root)).is_file():
        return

    def build() -> None:
        try:
            cached_wheel(root, store)
        except BaseException as err:  # reported by write_course_zip, in the main thread
            _FAILED["wheel"] = err

    _BACKGROUND["wheel"] = threading.Thread(target=build, name="tpp-wheel", daemon=True)
    _BACKGROUND["wheel"].start()


def write_course_zip(app, exception) -> None:
    """``build-finished``: the zip next to the HTML pages (HTML builders only)."""
    thread = _BACKGROUND.pop("wheel", None)
    if thread is not None:
        thread.join()
    if exception is not None or app.builder.format != "html" or app.builder.name == "singlehtml":
        return
    if "wheel" in _FAILED:
        raise _FAILED.pop("wheel")
    out = pack(Path(app.srcdir), Path(app.outdir) / ZIP_NAME,
               wheel_store=_wheel_store(app))
    from sphinx.util import logging

    logging.getLogger(__name__).info(f"the course's download: {out}")


def notebook_names(root: Path) -> list[str]:
    """The zip's notebooks by path (what the download page counts)."""
    return [f"{folder}/{p.name}" for folder, paths in notebooks(root).items() for p in paths]


def _pages(env) -> dict[str, list[str]]:
    """``{docname: notebook_names}`` of the pages that show the download (kept in the env)."""
    if not hasattr(env, "tpp_download_pages"):
        env.tpp_download_pages = {}
    return env.tpp_download_pages


def outdated_pages(app, env, added, changed, removed) -> list[str]:
    """``env-get-outdated``: the download pages whose count of notebooks is no longer true."""
    names = notebook_names(Path(env.srcdir))
    return [doc for doc, seen in _pages(env).items() if seen != names and doc not in removed]


def purge_page(app, env, docname) -> None:
    """``env-purge-doc``."""
    _pages(env).pop(docname, None)


def merge_pages(app, env, docnames, other) -> None:
    """``env-merge-info`` (parallel reading)."""
    _pages(env).update({d: n for d, n in _pages(other).items() if d in docnames})


class CourseDownloadDirective(Directive):
    """``{tpp-course-download}``: the link to the zip, what it holds, and the two lines."""

    has_content = False

    def run(self):
        env = self.state.document.settings.env
        root = Path(env.srcdir)
        found = notebooks(root)
        # the page names how many notebooks there are, not what they hold: it is read again when
        # the set of notebooks changes (outdated_pages), not after every edit of a chapter
        _pages(env)[env.docname] = notebook_names(root)
        env.note_dependency(str(root / "pyproject.toml"))  # the wheel's name
        href = "../" * env.docname.count("/") + ZIP_NAME
        para = nodes.paragraph()
        para += nodes.Text("Download the course: ")
        para += nodes.reference(ZIP_NAME, "", nodes.literal(ZIP_NAME, ZIP_NAME), refuri=href)
        para += nodes.Text(
            f" ({len(found['chapters'])} chapter notebooks, {len(found['exercises'])} exercise "
            f"notebooks and the library tpp as a wheel, {wheel_name(root)}). Unpack it and, with "
            "Python 3.11 or newer, run in its folder tpp-course:"
        )
        text = "\n".join(install_lines(root))
        block = nodes.literal_block(text, text, language="bash")
        after = nodes.paragraph(text=(
            "The first line makes a Python environment in .venv with tpp, JupyterLab and the "
            "widgets (pip downloads their dependencies); the second opens the first chapter."
        ))
        return [nodes.container("", para, block, after, classes=["tpp-course-download"])]
