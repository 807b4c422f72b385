"""The report's HTML: the blocks become a view (strings only), the Jinja2 template lays it out.

Content stays in Python (sections/*.py); layout, CSS and the markup of each block live in
templates/report.html.j2. The page is self-contained: figures are inline base64 PNG.
"""

from __future__ import annotations

import base64
import struct

import jinja2

from inferlab.report.milestones.common import Milestone
from inferlab.report.render import FINDINGS_HEADING, Document, cells, headers, rows_label, sections, table_parts
from inferlab.report.stamp_reader import stamp_line, stamp_lines

TEMPLATE = "report.html.j2"
MAX_PAIRED_COLUMNS = 7  # a wider table keeps the full width: beside its findings it would scroll
MAX_PAIRED_ASPECT = 3.0  # a wider figure (small multiples) keeps the full width instead of sitting beside text
# A figure is never drawn below this fraction of its natural size: its 10 pt labels, saved at 110 dpi, stay
# about 8 px tall. Narrower than that (a three-panel figure on a phone), it scrolls sideways like a table.
LEGIBLE_SCALE = 0.55
ENV = jinja2.Environment(loader=jinja2.PackageLoader("inferlab.report", "templates"),
                          autoescape=True, trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)


def _numeric(text: str) -> bool:
    return bool(text) and text.replace(",", "").replace(".", "", 1).lstrip("-+").isdigit()


def table_view(df, caption: str, slug: str | None = None, rows_in_full: int | None = None) -> dict:
    return {
        "caption": caption,
        "headers": [{"text": h, "theirs": "seed page" in h} for h in headers(df)],
        "rows": [[{"text": c, "numeric": _numeric(c)} for c in row] for row in cells(df)],
        "link": {"slug": slug, "label": rows_label(rows_in_full)} if slug and rows_in_full is not None else None,
    }


def _milestone_view(m: Milestone) -> dict:
    return {"id": m.id, "title": m.title, "status": m.status, "verdict": m.verdict,
            "stamps": stamp_lines(m.stamps), "stamp_line": stamp_line(m.stamps)}


def _figure_view(doc: Document, stem: str, caption: str) -> dict:
    png = doc.figures[stem]
    width, height = struct.unpack(">II", png[16:24])  # the PNG's IHDR chunk
    return {"stem": stem, "caption": caption, "aspect": width / height if height else 1.0,
            "min_width": round(LEGIBLE_SCALE * width),
            "src": f"data:image/png;base64,{base64.b64encode(png).decode()}"}


def block_view(doc: Document, block: tuple) -> dict:
    kind = block[0]
    if kind == "table":
        df, caption, slug = table_parts(block)
        full = doc.appendix_entry(slug)
        return {"kind": kind, **table_view(df, caption, slug, len(full.df) if full else None)}
    if kind == "figure":
        return {"kind": kind, **_figure_view(doc, block[1], block[2])}
    if kind == "milestone":
        return {"kind": kind, **_milestone_view(block[1])}
    if kind == "card":
        m, headline, stamps, change = block[1:]
        return {"kind": kind, **_milestone_view(m), "title": m.name, "headline": headline, "stamp_line": stamps,
                "change": change}
    if kind == "pair":  # (left blocks, right blocks): side by side on a wide screen
        return {"kind": kind, "left": [block_view(doc, b) for b in block[1]],
                "right": [block_view(doc, b) for b in block[2]], "wide": "left"}
    if kind == "findings":
        return {"kind": kind, "heading": FINDINGS_HEADING, "sentences": list(block[1])}
    if kind == "cause":
        return {"kind": kind, "text": block[1], "also": list(block[2])}
    if kind == "details":  # (summary, folded blocks): one line, opened on demand
        return {"kind": kind, "text": block[1], "inner": [block_view(doc, b) for b in block[2]]}
    return {"kind": kind, "text": block[1]}


def appendix_view(doc: Document) -> list[dict]:
    return [{"slug": t.slug, "title": t.title, "n_rows": len(t.df), "table": table_view(t.df, t.title),
             "figure": _figure_view(doc, t.figure, t.title) if t.figure else None} for t in doc.appendix]


def paired(views: list[dict]) -> list[dict]:
    """Side by side on a wide screen, stacked on a narrow one: the question and prediction beside the figure,
    the table beside its findings (reading order stays: question, prediction, figure, table, findings)."""
    out: list[dict] = []
    for v in views:
        if (v["kind"] == "findings" and out and out[-1]["kind"] == "table"
                and len(out[-1]["headers"]) <= MAX_PAIRED_COLUMNS):
            out.append({"kind": "pair", "left": [out.pop()], "right": [v], "wide": "left"})
        elif (v["kind"] == "figure" and v["aspect"] <= MAX_PAIRED_ASPECT and len(out) >= 2
              and out[-1]["kind"] == "prediction" and out[-2]["kind"] == "question"):
            lead = [out.pop(-2), out.pop()]
            out.append({"kind": "pair", "left": lead, "right": [v], "wide": "right"})
        else:
            out.append(v)
    return out


def html_page(doc: Document) -> str:
    view = []
    for s in sections(doc.blocks):
        view.append({**s, "experiment": bool(s["heading"]) and s["heading"].startswith("Experiment"),
                     "blocks": paired([block_view(doc, b) for b in s["blocks"]])})
    return ENV.get_template(TEMPLATE).render(title=doc.title, sections=view, appendix=appendix_view(doc))
