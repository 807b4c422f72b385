"""The report as a list of blocks, rendered twice: self-contained HTML and diffable Markdown.

Blocks: ("h1"|"h2"|"h3"|"p"|"note"|"warning", text), ("table", DataFrame, caption), ("figure", stem, caption),
("stamps", stamps dict), ("milestone", Milestone),
("card", Milestone, headline, stamp line, change line): the first screen's one card per milestone.
The HTML embeds figures as base64 PNG and
has no external reference of any kind; the Markdown links figures/<stem>.png next to it.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field

import pandas as pd

from inferlab.report.display import display_name
from inferlab.report.milestones.common import Milestone
from inferlab.report.stamp_reader import stamp_lines
from inferlab.review.numbers import fmt

Block = tuple


@dataclass
class Document:
    title: str
    blocks: list[Block] = field(default_factory=list)
    figures: dict[str, bytes] = field(default_factory=dict)  # stem -> PNG

    def add(self, *block) -> None:
        self.blocks.append(tuple(block))


# ------------------------------------------------------------------------------ formatting


def _cells(df: pd.DataFrame) -> list[list[str]]:
    out = []
    for row in df.itertuples(index=False):
        out.append([fmt(v.item() if hasattr(v, "item") else v) for v in row])
    return out


# ------------------------------------------------------------------------------ HTML

_CSS = """body{font-family:system-ui,sans-serif;max-width:72em;margin:1.5em auto;padding:0 1em;
color:#222;line-height:1.4}
table{border-collapse:collapse;margin:.5em 0 1em;font-size:.85em;display:block;overflow-x:auto}
td,th{border:1px solid #ccc;padding:.15em .45em}
td{text-align:right}td.t{text-align:left}th{background:#f3f3f3}
caption{caption-side:top;text-align:left;font-weight:600;padding:.3em 0}
.stamps{background:#f7f7fb;border-left:4px solid #88a;padding:.4em .8em;font-size:.85em}
.stamps ul{margin:0;padding-left:1.2em}
.pass{color:#17692d;font-weight:700}.fail{color:#b00020;font-weight:700}.missing{color:#a66f00;font-weight:700}
.stale{color:#6a1b9a;font-weight:700}.card{border:1px solid #bbc;border-radius:4px;padding:.3em 1em;margin:.6em 0}
.card p{margin:.25em 0}
.milestone{border:1px solid #ddd;padding:.5em 1em;margin:1em 0}.note{color:#555;font-size:.9em}
.warning{border-left:4px solid #b00;background:#fdecec;padding:.5em 1em}
.theirs{background:#fff6e0}img{max-width:100%}figure{margin:1em 0}figcaption{font-size:.85em;color:#444}
@media print{h2{break-before:page}.card,figure,table{break-inside:avoid}}"""


def _numeric(text: str) -> bool:
    return bool(text) and text.replace(",", "").replace(".", "", 1).lstrip("-+").isdigit()


def _html_table(df: pd.DataFrame, caption: str) -> str:
    head = "".join(
        f"<th{' class=theirs' if 'seed page' in str(c) else ''}>{html.escape(display_name(c))}</th>"
        for c in df.columns
    )
    body = []
    for row in _cells(df):
        body.append(
            "<tr>" + "".join(f"<td{'' if _numeric(c) else ' class=t'}>{html.escape(c)}</td>" for c in row) + "</tr>"
        )
    return (
        f"<table><caption>{html.escape(caption)}</caption><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def to_html(doc: Document) -> str:
    parts = [
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(doc.title)}</title>'
        f"<style>{_CSS}</style></head><body>"
    ]
    for block in doc.blocks:
        kind = block[0]
        if kind in ("h1", "h2", "h3"):
            parts.append(f"<{kind}>{html.escape(block[1])}</{kind}>")
        elif kind == "p":
            parts.append(f"<p>{html.escape(block[1])}</p>")
        elif kind == "note":
            parts.append(f'<p class="note">{html.escape(block[1])}</p>')
        elif kind == "warning":
            parts.append(f'<p class="warning" role="alert">{html.escape(block[1])}</p>')
        elif kind == "table":
            parts.append(_html_table(block[1], block[2]))
        elif kind == "figure":
            png = base64.b64encode(doc.figures[block[1]]).decode()
            parts.append(
                f'<figure><img alt="{html.escape(block[2])}" src="data:image/png;base64,{png}">'
                f"<figcaption>{html.escape(block[2])}</figcaption></figure>"
            )
        elif kind == "stamps":
            items = "".join(f"<li>{html.escape(line)}</li>" for line in stamp_lines(block[1]))
            parts.append(f'<div class="stamps"><ul>{items}</ul></div>')
        elif kind == "milestone":
            m: Milestone = block[1]
            parts.append(
                f'<div class="milestone"><p><b>{html.escape(m.title)}</b>: '
                f'<span class="{m.status}">{m.status.upper()}</span></p><p>{html.escape(m.verdict)}</p>'
            )
            items = "".join(f"<li>{html.escape(line)}</li>" for line in stamp_lines(m.stamps))
            parts.append(f'<div class="stamps"><ul>{items}</ul></div></div>')
        elif kind == "card":
            m, headline, stamps, change = block[1:]
            parts.append(
                f'<div class="card"><p><b>{html.escape(m.id)}</b> <span class="{m.status}">{m.status.upper()}'
                f"</span> {html.escape(m.title)}</p><p>{html.escape(headline)}</p>"
                f'<p class="note">{html.escape(stamps)}</p>'
                f'<p class="note">{html.escape(change)}</p></div>'
            )
    parts.append("</body></html>")
    return "\n".join(parts)


# ------------------------------------------------------------------------------ Markdown


def _md_escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def to_markdown(doc: Document, figure_dir: str = "figures") -> str:
    lines = []
    for block in doc.blocks:
        kind = block[0]
        if kind in ("h1", "h2", "h3"):
            lines += ["#" * int(kind[1]) + " " + block[1], ""]
        elif kind == "p":
            lines += [block[1], ""]
        elif kind == "note":
            lines += [f"*{block[1]}*", ""]
        elif kind == "warning":
            lines += [f"> **Warning:** {block[1]}", ""]
        elif kind == "table":
            df = block[1]
            lines += [
                f"**{block[2]}**",
                "",
                "| " + " | ".join(_md_escape(display_name(c)) for c in df.columns) + " |",
                "|" + "---|" * len(df.columns),
            ]
            lines += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in _cells(df)]
            lines.append("")
        elif kind == "figure":
            lines += [f"![{block[2]}]({figure_dir}/{block[1]}.png)", ""]
        elif kind == "stamps":
            lines += [f"> {line}  " for line in stamp_lines(block[1])] + [""]
        elif kind == "milestone":
            m: Milestone = block[1]
            lines += [f"**{m.title}: {m.status.upper()}**", "", m.verdict, ""]
            lines += [f"> {line}  " for line in stamp_lines(m.stamps)] + [""]
        elif kind == "card":
            m, headline, stamps, change = block[1:]
            lines += [f"**{m.id} {m.status.upper()}**: {m.title}", "", headline, "",
                      f"> {stamps}  ", f"> {change}", ""]
    return "\n".join(lines).rstrip() + "\n"


# ------------------------------------------------------------------------------ content
