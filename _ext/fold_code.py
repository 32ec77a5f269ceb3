"""Fold the plumbing of the chapters behind "show code": cell tags by clear rules.

A chapter's page shows the code a reader learns from — the derivation (SymPy), the simulation
(``tpp``) and the agreement (the ``assert``) — and folds the rest behind myst-nb's "show code"
button (tag ``hide-input``; the output stays on the page):

* **plotting**: at least 40 % of the cell's code lines draw with matplotlib (``plt.``, ``ax.``,
  ``fig.``, ``gantt(``…);
* **formatting**: at least 50 % of its lines glue numbers into the prose (``glue(``) or build
  Markdown/HTML for display (table rows ``"| … |"``, ``Markdown(``, ``HTML(``, ``.join(``);
* **set-up**: every line imports or configures (``import``, ``os.environ``, ``warnings``, ``%…``).

A cell that asserts (``assert``) or derives with SymPy stays visible whatever else it does, and a
widget cell (``widgets.interact``, whose output the site removes) loses its input on the site too
(``remove-input``): in JupyterLab it is the live explorer, on the site it would be build plumbing.
Only ``metadata.tags`` change, and tags are only added (never removed), so the script can run
again after other edits: ``python _ext/fold_code.py chapters/*.ipynb`` (``--check`` lists what it
would change and exits 1 if anything).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

HIDDEN = {"hide-input", "remove-input", "remove-cell"}
PLOT = re.compile(
    r"\b(?:plt|ax|axs|axes|ax\d|ax_\w+|fig|twin)\s*[.\[]|\bmatplotlib\b|\bgantt\w*\(|"
    r"\.(?:plot|bar|barh|scatter|imshow|fill_between|axvline|axhline|annotate|legend|"
    r"set_\w+|tick_params|savefig|subplots)\("
)
FORMAT = re.compile(
    r"\bglue\(|\bMarkdown\(|\bHTML\(|[\"']\s*\|.*\|\s*[\"'\\]|\.join\(|^\s*(?:rows|lines|table|md)"
    r"\s*(?:\+=|\.append\(|=\s*\[)"
)
SETUP = re.compile(
    r"^\s*(?:import\s|from\s+\S+\s+import\s|os\.environ|warnings\.|%|sys\.path|"
    r"np\.set_printoptions|sp\.init_printing|plt\.rcParams|matplotlib\.)"
)
KEEP = re.compile(r"^\s*assert\b|\bsp\.(?:symbols|simplify|solve|diff|Eq|expand|factor|limit)\b|"
                  r"\bsympy\b|\bsymbolic\.")
WIDGET = re.compile(r"\bwidgets\.interact|\binteract\(")


def code_lines(source: str) -> list[str]:
    """The lines a reader reads: neither blank nor only a comment."""
    return [ln for ln in source.splitlines() if ln.strip() and not ln.strip().startswith("#")]


def fold_reason(source: str) -> str | None:
    """Why a code cell's input should be folded ("plotting", "formatting", "set-up"), removed
    from the site ("widget"), or ``None`` when the reader should see it."""
    lines = code_lines(source)
    if not lines:
        return None
    if WIDGET.search(source):
        return "widget"
    if all(SETUP.search(ln) for ln in lines):
        return "set-up"
    if any(KEEP.search(ln) for ln in lines):
        return None
    if sum(bool(PLOT.search(ln)) for ln in lines) >= 0.4 * len(lines):
        return "plotting"
    if sum(bool(FORMAT.search(ln)) for ln in lines) >= 0.5 * len(lines):
        return "formatting"
    return None


def tag_for(reason: str) -> str:
    return "remove-input" if reason == "widget" else "hide-input"


def fold(path: Path, write: bool = True) -> list[tuple[int, str, str]]:
    """Add the tags the rules give to ``path``'s code cells; return (cell index, reason, tag)."""
    nb = nbformat.read(path, as_version=4)
    changes = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        tags = list(cell.metadata.get("tags", []))
        reason = fold_reason(cell.source)
        if reason is None or HIDDEN & set(tags):
            continue
        tag = tag_for(reason)
        cell.metadata["tags"] = [*tags, tag]
        changes.append((i, reason, tag))
    if changes and write:
        nbformat.write(nb, path)
    return changes


def visible_code_lines(path: Path) -> int:
    """Code lines shown on the site's page (cells not folded, removed or hidden)."""
    nb = nbformat.read(path, as_version=4)
    return sum(
        len(code_lines(c.source))
        for c in nb.cells
        if c.cell_type == "code" and not HIDDEN & set(c.metadata.get("tags", []))
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("notebooks", nargs="+", type=Path)
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if it would")
    args = ap.parse_args(argv)
    pending = 0
    for path in args.notebooks:
        changes = fold(path, write=not args.check)
        pending += len(changes)
        for i, reason, tag in changes:
            print(f"{path}: cell {i}: {reason} -> {tag}")
        print(f"{path}: {visible_code_lines(path)} visible code lines")
    return 1 if args.check and pending else 0


if __name__ == "__main__":
    sys.exit(main())
