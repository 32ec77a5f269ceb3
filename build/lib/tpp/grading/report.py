"""What a grading run writes: feedback, ``results.json``, ``gradebook.csv``, the class report.

Every write is atomic (a fresh temporary file in the same folder, then ``os.replace``) into the
results folder, which no kernel can see (it is outside the sandbox). Student-controlled text is
truncated and cleaned; hidden checks are reported by number only.
"""

from __future__ import annotations

import csv
import io
import json
import os
import secrets
from collections import Counter
from pathlib import Path
from typing import Any

from tpp.grading.notebook import Master
from tpp.grading.rows import WORDING, clip


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name[:80]}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _clean(text: str, limit: int = 300) -> str:
    """One line of student-controlled text, safe inside Markdown inline code."""
    return clip(str(text).replace("`", "'"), limit)


def feedback_markdown(row: dict[str, Any], master: Master) -> str:
    """The student's feedback: per question, one wording per result, public checks only."""
    lines = [
        f"# Feedback: {master.assignment} — {_clean(row['student'], 120)}",
        "",
        f"**Total: {fmt(row['total'])} / {fmt(row['max'])} points.** Status: {row['status']}"
        + (f" — {_clean(row['reason'])}" if row["reason"] else ""),
        "",
    ]
    for w in row.get("warnings", []):
        lines.append(f"- warning: {_clean(w)}")
    if row.get("warnings"):
        lines.append("")
    for q in master.questions:
        info = row["questions"][q.id]
        lines.append(f"## {q.id}: {fmt(info['points'])} / {fmt(info['max'])} — {info['result']}")
        if info["result"] != "correct":
            lines.append(f"- {WORDING.get(info['result'], info['result'])}")
        if info["detail"] and info["result"] != "correct" and info["detail"] != row["reason"]:
            lines.append(f"- `{_clean(info['detail'])}`")
        for chk in info["checks"]:
            if chk["kind"] == "public":
                if chk["passed"]:
                    lines.append(f"- public check {chk['k']}: passed")
                else:
                    lines.append(
                        f"- public check {chk['k']} failed: `{_clean(chk['message'] or 'error')}`"
                    )
            elif not chk["passed"]:
                lines.append(f"- hidden check {chk['k']} failed")
        lines.append("")
    return "\n".join(lines)


def csv_cell(value: Any) -> str:
    """Spreadsheet-safe text: a leading =, +, -, @ would be read as a formula."""
    text = str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def gradebook_csv(rows: list[dict[str, Any]], master: Master) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["student", *[q.id for q in master.questions], "total", "max", "status", "reason"])
    for r in rows:
        w.writerow(
            [
                csv_cell(r["student"]),  # at most 200 characters (tpp.grading.inputs)
                *[fmt(r["points"][q.id]) for q in master.questions],
                fmt(r["total"]),
                fmt(r["max"]),
                r["status"],
                csv_cell(_clean(r["reason"], 200)),
            ]
        )
    return out.getvalue()


def class_report(rows: list[dict[str, Any]], master: Master) -> list[dict[str, Any]]:
    """Per question: how many right, how many per result, the most common wrong answers."""
    out = []
    for q in master.questions:
        results = Counter(r["questions"][q.id]["result"] for r in rows)
        wrong: Counter[str] = Counter()
        for r in rows:
            if r["questions"][q.id]["result"] == "incorrect":
                vals = r.get("submitted", {}).get(q.id, {})
                wrong[", ".join(f"{k}={v}" for k, v in sorted(vals.items()))[:120]] += 1
        out.append({
            "question": q.id,
            "students": len(rows),
            "correct": results.get("correct", 0),
            "results": dict(sorted(results.items())),
            "common_wrong": wrong.most_common(3),
        })  # fmt: skip
    return out


def class_report_csv(report: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["question", "students", "correct", "results", "common wrong answers"])
    for r in report:
        w.writerow([
            r["question"], r["students"], r["correct"],
            "; ".join(f"{k} {n}" for k, n in r["results"].items()),
            csv_cell(" | ".join(f"{v} ({n})" for v, n in r["common_wrong"])),
        ])  # fmt: skip
    return out.getvalue()


def class_report_markdown(report: list[dict[str, Any]], master: Master) -> str:
    lines = [f"# Class report: {master.assignment}", "",
             "| question | right | results | most common wrong answers |",
             "|---|---|---|---|"]  # fmt: skip
    for r in report:
        wrong = "; ".join(f"`{_clean(v, 60)}` ({n})" for v, n in r["common_wrong"]) or "—"
        res = ", ".join(f"{k} {n}" for k, n in r["results"].items())
        lines.append(f"| {r['question']} | {r['correct']} / {r['students']} | {res} | "
                     f"{wrong.replace('|', '/')} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def write_outputs(out: Path, rows: list[dict[str, Any]], master: Master) -> None:
    rows = sorted(rows, key=lambda r: r["student"])
    results = {
        "assignment": master.assignment,
        "title": master.title,
        "questions": [{"id": q.id, "points": q.points} for q in master.questions],
        "max": master.max_points,
        "students": rows,
    }
    atomic_write(out / "results.json", json.dumps(results, indent=1, sort_keys=True))
    atomic_write(out / "gradebook.csv", gradebook_csv(rows, master))
    report = class_report(rows, master)
    atomic_write(out / "class-report.csv", class_report_csv(report))
    atomic_write(out / "class-report.md", class_report_markdown(report, master))
