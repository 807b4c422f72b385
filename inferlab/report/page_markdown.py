"""The report's Markdown twin: the same body, figures linked as files, appendix tables as CSV files."""

from __future__ import annotations

from pathlib import Path

from inferlab.report.milestones.common import Milestone
from inferlab.report.render import FINDINGS_HEADING, Document, cells, headers, rows_label, table_parts
from inferlab.report.stamp_reader import stamp_lines


def _md_escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def table_lines(df, caption: str, link: str | None = None) -> list[str]:
    lines = [f"**{caption}**", "", "| " + " | ".join(_md_escape(h) for h in headers(df)) + " |",
             "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in cells(df)]
    return [*lines, "", *([link, ""] if link else [])]


def _milestone_lines(m: Milestone) -> list[str]:
    return [f"**{m.title}: {m.status.upper()}**", "", m.verdict, "",
            *[f"> {line}  " for line in stamp_lines(m.stamps)], ""]


def block_lines(doc: Document, block: tuple, figure_dir: str, appendix_dir: str) -> list[str]:
    kind = block[0]
    if kind in ("h1", "h2", "h3"):
        return ["#" * int(kind[1]) + " " + block[1], ""]
    if kind == "p":
        return [block[1], ""]
    if kind == "question":
        return [f"**Question.** {block[1]}", ""]
    if kind == "prediction":
        return [f"**Prediction, from theory before measuring:** {block[1]}", ""]
    if kind == "note":
        return [f"*{block[1]}*", ""]
    if kind == "cause":
        return [f"**{block[1]}**", "", *[f"- also {line}" for line in block[2]], *([""] if block[2] else [])]
    if kind == "details":
        inner = [line for b in block[2] for line in block_lines(doc, b, figure_dir, appendix_dir)]
        return [f"<details><summary>{block[1]}</summary>", "", *inner, "</details>", ""]
    if kind == "warning":
        return [f"> **Warning:** {block[1]}", ""]
    if kind == "pair":
        return [line for b in (*block[1], *block[2]) for line in block_lines(doc, b, figure_dir, appendix_dir)]
    if kind == "findings":
        return [f"### {FINDINGS_HEADING}", "", *[f"{i}. {item}" for i, item in enumerate(block[1], 1)], ""]
    if kind == "table":
        df, caption, slug = table_parts(block)
        full = doc.appendix_entry(slug)
        link = f"[{rows_label(len(full.df))}]({appendix_dir}/{full.slug}.csv)" if full else None
        return table_lines(df, caption, link)
    if kind == "figure":
        return [f"![{block[2]}]({figure_dir}/{block[1]}.png)", ""]
    if kind == "milestone":
        return _milestone_lines(block[1])
    if kind == "card":
        m, headline, stamps, change = block[1:]
        return [f"**{m.id} {m.status.upper()}**: {m.name}", "", headline, "", f"> {stamps}  ", f"> {change}", ""]
    raise ValueError(f"unknown block kind {kind!r}")


def appendix_lines(doc: Document, figure_dir: str, appendix_dir: str) -> list[str]:
    if not doc.appendix:
        return []
    lines = ["## Appendix: full tables", "", "Every table the report read, complete, as CSV files next to this "
             "report (column identifiers as in the Parquet tables).", ""]
    for t in doc.appendix:
        lines.append(f"- [{t.title}]({appendix_dir}/{t.slug}.csv) ({rows_label(len(t.df))})"
                     + (f"; figure: ![{t.title}]({figure_dir}/{t.figure}.png)" if t.figure else ""))
    return [*lines, ""]


def markdown_page(doc: Document, figure_dir: str = "figures", appendix_dir: str = "appendix") -> str:
    lines: list[str] = []
    for block in doc.blocks:
        lines += block_lines(doc, block, figure_dir, appendix_dir)
    lines += appendix_lines(doc, figure_dir, appendix_dir)
    return "\n".join(lines).rstrip() + "\n"


def write_appendix(doc: Document, directory: str | Path) -> dict[str, Path]:
    """Every appendix table as <directory>/<slug>.csv (UTF-8, full precision); returns {slug: path}."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.csv"):
        stale.unlink()
    written = {}
    for t in doc.appendix:
        path = directory / f"{t.slug}.csv"
        t.df.to_csv(path, index=False, encoding="utf-8")
        written[t.slug] = path
    return written
