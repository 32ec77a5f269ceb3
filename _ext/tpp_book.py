"""The course site's own Sphinx extension (loaded through ``sphinx.local_extensions``).

* live code (thebe) off: sphinx-thebe's handlers are disconnected, so no page declares
  ``THEBE_JS_URL`` (twice) or points at an unrelated binder repository;
* the repository link: ``repository.url`` in ``_config.yml`` turns on the theme's repository and
  issue buttons when it is set, and leaves no link when it is empty;
* one search field (the header's button), a footer without the author line, ``_static/tpp.css``;
* the bibliography style ``authoryear``: author–year labels like the citations, sorted by author,
  and an arXiv link for every entry whose ``eprint``, ``journal`` or ``note`` names an arXiv id;
* ``singlehtml`` (``make pdf``) renders every node ``html`` renders;
* the directive ``tpp-assignments``: the table of graded assignments, read from the masters in
  ``solutions/`` at every build (a new master appears without editing the page);
* the directive ``tpp-map``: the course's map, one line per part of ``_toc.yml`` (a new chapter
  appears without editing the page);
* the download of the course for a reader who has only the site: ``make book`` packs the chapters'
  and exercises' notebooks and the ``tpp`` wheel into ``_build/html/tpp-course.zip``
  (:mod:`course_download`); the directive ``tpp-course-download`` links it with the two lines that
  install and open it;
* the directive ``tpp-repository``: a sentence about the course's repository (where to report a
  mistake, where the source is) only when ``repository.url`` is set, nothing otherwise;
* ``_static/tpp.js``: the theme's ☰ and contents buttons work at every width, and search snippets
  show mathematics as text rather than TeX; the theme mode defaults to ``auto`` (an unset mode
  made the theme log "Got invalid theme mode" on a first visit).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import course_download  # a sibling module in _ext, on sys.path as the extension is
from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.statemachine import StringList
from pybtex.plugin import register_plugin
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle
from pybtex.style.sorting.author_year_title import SortingStyle
from sphinx import addnodes

JB_DEFAULT_REPOSITORY = "https://github.com/executablebooks/jupyter-book"
ARXIV = re.compile(r"arXiv[:\s]*(\d{4}\.\d{4,5})(v\d+)?", re.IGNORECASE)
DOC_REF = re.compile(r"\{doc\}`(?:[^`<]*<)?(?:\.\./chapters/|chapters/)?(\d\d_[\w]+)>?`")
CHAPTER_PATH = re.compile(r"chapters/(\d\d_\w+)\.ipynb")


# --------------------------------------------------------------------------- bibliography
def _last_names(entry) -> str:
    persons = entry.persons.get("author") or entry.persons.get("editor") or []
    names = [" ".join(p.last_names).replace("{", "").replace("}", "") for p in persons]
    if not names:   # as the in-text citation shows it: the title
        title = entry.fields.get("title", entry.key)
        return title.replace("{", "").replace("}", "").replace("\\&", "&")
    if len(names) == 1:
        return names[0]
    if len(names) == 2:
        return f"{names[0]} and {names[1]}"
    return f"{names[0]} et al."


class AuthorYearLabels(BaseLabelStyle):
    """Labels ``Shoeybi et al., 2019`` (``a``, ``b`` appended when two would be equal)."""

    def format_labels(self, sorted_entries):
        labels = [f"{_last_names(e)}, {e.fields.get('year', 'n.d.')}" for e in sorted_entries]
        seen: dict[str, int] = {}
        for lab in labels:
            seen[lab] = seen.get(lab, 0) + 1
        count: dict[str, int] = {}
        for lab in labels:
            if seen[lab] > 1:
                count[lab] = count.get(lab, 0) + 1
                yield lab + "abcdefghijklmnopqrstuvwxyz"[count[lab] - 1]
            else:
                yield lab


class AuthorYearStyle(UnsrtStyle):
    """unsrt's entries, author–year labels and order, arXiv ids turned into links."""

    default_label_style = AuthorYearLabels
    default_sorting_style = SortingStyle

    def format_entry(self, label, entry, bib_data=None):
        if "eprint" not in entry.fields and "url" not in entry.fields:
            for key in ("journal", "note", "howpublished"):
                found = ARXIV.search(entry.fields.get(key, ""))
                if found:
                    entry.fields["eprint"] = found.group(1)
                    break
        return super().format_entry(label, entry, bib_data=bib_data)


# --------------------------------------------------------------------------- assignments
def _assignments(root: Path) -> list[dict]:
    """Title, points, chapters needed and files of every master in ``solutions/``."""
    rows = []
    for master in sorted((root / "solutions").glob("*.ipynb")):
        nb = json.loads(master.read_text(encoding="utf-8"))
        meta = nb.get("metadata", {}).get("tpp", {})
        if not meta.get("assignment"):
            continue
        text = "\n".join(
            "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in nb.get("cells", [])
            if c.get("cell_type") == "markdown"
        )
        needs = set(DOC_REF.findall(text)) | set(CHAPTER_PATH.findall(text))
        if meta.get("chapter"):
            needs.add(meta["chapter"])
        needs = {n for n in needs if (root / "chapters" / f"{n}.ipynb").exists()}
        rows.append(
            {
                "id": meta["assignment"],
                "title": meta.get("title", meta["assignment"]),
                "points": sum(q.get("points", 0) for q in meta.get("questions", [])),
                "questions": len(meta.get("questions", [])),
                "needs": sorted(needs),
                "file": master.name,
            }
        )
    return rows


class AssignmentsDirective(Directive):
    """``{tpp-assignments}``: a table of every graded assignment (from ``solutions/``)."""

    has_content = False

    def run(self):
        env = self.state.document.settings.env
        root = Path(env.srcdir)
        rows = _assignments(root)
        for master in (root / "solutions").glob("*.ipynb"):
            env.note_dependency(str(master))
        if not rows:
            return [nodes.paragraph(text="No graded assignment yet.")]
        lines = [
            "| assignment | questions (points) | read first | notebook |",
            "|---|---|---|---|",
        ]
        for r in rows:
            needs = ", ".join(f"{{doc}}`{n}`" for n in r["needs"]) or "—"
            notebook = f"{{download}}`{r['file']} <../exercises/{r['file']}>`"
            lines.append(
                f"| **{r['title']}** ({r['id']}) | {r['questions']} ({r['points']}) "
                f"| {needs} | {notebook} |"
            )
        container = nodes.container(classes=["tpp-assignments"])
        self.state.nested_parse(StringList(lines), self.content_offset, container)
        return [container]


# --------------------------------------------------------------------------- map
def _toc_parts(root: Path) -> list[tuple[str, list[str]]]:
    """(caption, [docname, ...]) for every part of ``_toc.yml``, sections included."""
    import yaml

    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))

    def files(entries) -> list[str]:
        found = []
        for entry in entries or []:
            if "file" in entry:
                found.append(entry["file"])
            found += files(entry.get("sections"))
        return found

    parts = [(p.get("caption", ""), files(p.get("chapters"))) for p in toc.get("parts", [])]
    if toc.get("chapters"):
        parts.append(("", files(toc["chapters"])))
    return [(caption, docs) for caption, docs in parts if docs]


def _doc_ref(env, target: str) -> addnodes.pending_xref:
    """A ``{doc}`` reference to ``target`` (a path from the book's root), shown by its title."""
    ref = addnodes.pending_xref(
        "", refdomain="std", reftype="doc", reftarget="/" + target.removesuffix(".md"),
        refexplicit=False, refwarn=True, refdoc=env.docname,
    )
    ref += nodes.inline(target, target)
    return ref


class MapDirective(Directive):
    """``{tpp-map}``: every part of ``_toc.yml`` with links to its chapters, in order."""

    has_content = False

    def run(self):
        env = self.state.document.settings.env
        root = Path(env.srcdir)
        env.note_dependency(str(root / "_toc.yml"))
        items = nodes.bullet_list(classes=["tpp-map"])
        for caption, docs in _toc_parts(root):
            para = nodes.paragraph()
            if caption:
                para += nodes.strong(caption, caption)
                para += nodes.Text(": ")
            for i, doc in enumerate(docs):
                if i:
                    para += nodes.Text("; ")
                para += _doc_ref(env, doc)
            items += nodes.list_item("", para)
        return [items]


# --------------------------------------------------------------------------- repository
def _repository_url(config) -> str:
    """``repository.url`` of ``_config.yml`` ('' when unset or jupyter-book's placeholder)."""
    url = ((config.html_theme_options or {}).get("repository_url") or "").strip()
    return "" if url.rstrip("/") in ("", JB_DEFAULT_REPOSITORY) else url.rstrip("/")


class RepositoryDirective(Directive):
    """``{tpp-repository} report`` or ``source``: a sentence naming the course's repository,
    rendered only when ``repository.url`` is configured (a site without one says nothing about
    repository buttons it does not have)."""

    required_arguments = 1
    has_content = False

    def run(self):
        env = self.state.document.settings.env
        url = _repository_url(env.config)
        kind = self.arguments[0]
        if kind not in ("report", "source"):
            raise self.error(f"tpp-repository takes 'report' or 'source', not {kind!r}")
        if not url:
            return []
        para = nodes.paragraph()
        link = nodes.reference(url, url, refuri=url)
        if kind == "report":
            para += nodes.Text("Found a mistake? Please report it on the course's repository, ")
            para += link
            para += nodes.Text(" (the buttons at the top of each page lead there).")
        else:
            para += nodes.Text("The course's source is the repository ")
            para += link
            para += nodes.Text(": clone it to run, change and build everything.")
        return [para]


# --------------------------------------------------------------------------- set-up
def _configure(app, config) -> None:
    opts = dict(config.html_theme_options or {})
    url = (opts.get("repository_url") or "").strip()
    on = bool(url) and url.rstrip("/") != JB_DEFAULT_REPOSITORY
    opts["repository_url"] = url if on else ""
    opts["use_repository_button"] = on
    opts["use_issues_button"] = on
    opts["footer_content_items"] = ["copyright", "extra-footer"]
    config.html_theme_options = opts
    # pydata-sphinx-theme reads the mode from the page context; unset, it logs an error
    config.html_context = {"default_mode": "auto", **(config.html_context or {})}
    # the header's search button stays; the sidebar's search field goes
    config.html_sidebars = {"**": ["navbar-logo.html", "icon-links.html", "sbt-sidebar-nav.html"]}
    static = str(Path(app.srcdir) / "_static")
    if Path(static).is_dir() and static not in config.html_static_path and "_static" not in [
        str(p) for p in config.html_static_path
    ]:
        config.html_static_path.append(static)
    # jupyter-book adds every file in _static to every page; this extension adds its own two
    # (the script deferred), once
    def _name(entry) -> str:
        return entry[0] if isinstance(entry, tuple | list) else entry

    config.html_css_files = [f for f in config.html_css_files if _name(f) != "tpp.css"]
    config.html_js_files = [f for f in config.html_js_files if _name(f) != "tpp.js"]
    # live code off: disconnect sphinx-thebe (jupyter-book always loads it)
    for event in ("env-before-read-docs", "doctree-resolved"):
        for listener in list(app.events.listeners.get(event, [])):
            if listener.handler.__name__ in ("init_thebe_core", "update_thebe_context"):
                app.disconnect(listener.id)


def _singlehtml_handlers(app) -> None:
    """``make pdf`` builds ``singlehtml``: give it every node visitor registered for ``html``.

    Some extensions register visitors for ``singlehtml`` too, and then Sphinx stops falling back
    to the ``html`` ones (myst-nb's hidden-input node would be unknown).
    """
    handlers = app.registry.translation_handlers
    if app.builder.name == "singlehtml" and "singlehtml" in handlers:
        for node, visitors in handlers.get("html", {}).items():
            handlers["singlehtml"].setdefault(node, visitors)


def setup(app):
    register_plugin("pybtex.style.formatting", "authoryear", AuthorYearStyle)
    app.connect("config-inited", _configure, priority=900)
    app.connect("builder-inited", _singlehtml_handlers)
    app.add_css_file("tpp.css")
    app.add_js_file("tpp.js", loading_method="defer")
    app.add_directive("tpp-assignments", AssignmentsDirective)
    app.add_directive("tpp-map", MapDirective)
    app.add_directive("tpp-repository", RepositoryDirective)
    app.add_directive("tpp-course-download", course_download.CourseDownloadDirective)
    app.connect("env-get-outdated", course_download.outdated_pages)
    app.connect("env-purge-doc", course_download.purge_page)
    app.connect("env-merge-info", course_download.merge_pages)
    app.connect("builder-inited", course_download.start_wheel)
    app.connect("build-finished", course_download.write_course_zip)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
