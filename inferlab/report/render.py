"""The report as a list of blocks plus an appendix of full tables, rendered twice: HTML and Markdown.

Blocks: ("h1"|"h2"|"h3"|"p"|"note"|"warning"|"question"|"prediction", text), ("findings", [sentences]),
("table", DataFrame, caption[, appendix slug]), ("figure", stem, caption),
("milestone", Milestone): its status and verdict (narrative.verdict_blocks puts its targets table, a "table"
block, and the producers' statements, "note" blocks, under it), ("card", Milestone, headline, stamp line,
change line),
("pair", [blocks], [blocks]): two columns on a wide screen, one after the other on a narrow one,
("cause", heading, [further lines]), ("details", summary, [blocks]): one line, its blocks folded under it.
A body table names the appendix table it was cut from; the appendix holds every table complete.
The HTML (page_html.py, from a Jinja2 template) embeds figures as base64 PNG and has no external
reference; the Markdown (page_markdown.py) links figures/<stem>.png and appendix/<slug>.csv.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pandas as pd

from inferlab.experiments import display_name
from inferlab.review.numbers import fmt

Block = tuple
FINDINGS_HEADING = "What to read from it"  # the lab page's 三件事可以直接读出来


@dataclass
class FullTable:
    slug: str  # its anchor in the HTML and its file name under appendix/
    title: str
    df: pd.DataFrame
    figure: str | None = None  # a figure stem shown with it (one that does not carry the body's message)


@dataclass
class Document:
    title: str
    blocks: list[Block] = field(default_factory=list)
    figures: dict[str, bytes] = field(default_factory=dict)  # stem -> PNG
    appendix: list[FullTable] = field(default_factory=list)

    def add(self, *block) -> None:
        self.blocks.append(tuple(block))

    def full_table(self, slug: str, title: str, df: pd.DataFrame, figure: str | None = None) -> str:
        """Adds a table to the appendix (once per slug) and returns the slug a body table links to."""
        slug = re.sub(r"[^a-z0-9-]+", "-", slug.lower()).strip("-")
        if all(t.slug != slug for t in self.appendix):
            self.appendix.append(FullTable(slug, title, df.reset_index(drop=True), figure))
        return slug

    def appendix_entry(self, slug: str | None) -> FullTable | None:
        return next((t for t in self.appendix if t.slug == slug), None)


def cells(df: pd.DataFrame) -> list[list[str]]:
    return [[fmt(v) for v in row] for row in df.itertuples(index=False)]


def headers(df: pd.DataFrame) -> list[str]:
    return [display_name(c) for c in df.columns]


def rows_label(n: int) -> str:
    return f"all {n} row{'s' if n != 1 else ''}"


def table_parts(block: Block) -> tuple[pd.DataFrame, str, str | None]:
    """(table, caption, appendix slug or None) of a table block, with or without a slug."""
    return block[1], block[2], block[3] if len(block) > 3 else None


def sections(blocks: list[Block]) -> list[dict]:
    """Blocks grouped at each h2: {"heading": text or None, "id": anchor, "blocks": [...]}.

    The HTML wraps each group in a <section>, so printing breaks pages between experiments."""
    groups = [{"heading": None, "id": "top", "blocks": []}]
    for block in blocks:
        if block[0] == "h2":
            anchor = re.sub(r"[^a-z0-9]+", "-", block[1].lower()).strip("-")
            groups.append({"heading": block[1], "id": anchor, "blocks": []})
        else:
            groups[-1]["blocks"].append(block)
    return [g for g in groups if g["heading"] is not None or g["blocks"]]
