"""Every experiment's spec, gathered: what the report rule, the report and the review read.

Torch-free and import-light: the report rule reads it at parse time, and both inferlab.report and
inferlab.review import it.
"""

from __future__ import annotations

from inferlab.kvcache.spec import SPEC as KVCACHE
from inferlab.quant.spec import SPEC as QUANT
from inferlab.sampling.spec import SPEC as SAMPLING
from inferlab.spec import Figure, Spec, Table
from inferlab.speculative.spec import SPEC as SPECULATIVE
from inferlab.training.spec import SPEC as SETUP

SPECS: tuple[Spec, ...] = (SETUP, KVCACHE, SAMPLING, SPECULATIVE, QUANT)
MILESTONES: dict[str, Spec] = {spec.milestone: spec for spec in SPECS if spec.milestone}

TABLES: dict[str, Table] = {table.key: table for spec in SPECS for table in spec.tables}
# Tables the workflow writes, and committed ones measured outside it (rule None; output is the file).
RULE_TABLES = {key: table for key, table in TABLES.items() if table.rule is not None}
REFERENCE_TABLES = {key: table for key, table in TABLES.items() if table.rule is None}

OVERLAYS: tuple[tuple[str, str, str], ...] = tuple((spec.name, *spec.overlay) for spec in SPECS if spec.overlay)

# The review's figure: drawn by inferlab.review.diff_figure from the diff (one panel per spec overlay), not from
# the report's inputs.
CHANGES_FIGURE = "changes_overlay"
CHANGES_OVERLAY = Figure(
    "Changes: old vs new headline metrics, one panel per experiment", "Review",
    caption=("This run (new) against the run it is compared with (old): the previous ledger entry, else the pinned "
             "reference reports/reference/metrics.parquet, or for a reproduction the published run it imported; with "
             "none, the new bars alone. One panel per experiment: " + "; ".join(title for *_, title in OVERLAYS)
             + ". Error bars run from each metric's low to its high, its noise as results/metrics.parquet records "
             "it. The report's 'Changes since' section lists every metric whose change exceeds its own noise."),
    draw=None)


def gather_figures(specs: tuple[Spec, ...]) -> dict[str, Figure]:
    """Every PNG of the report, by file stem (reports/figures/<stem>.png): each spec's figures, then the review's."""
    return {**{stem: figure for spec in specs for stem, figure in spec.figures.items()},
            CHANGES_FIGURE: CHANGES_OVERLAY}


FIGURES: dict[str, Figure] = gather_figures(SPECS)


def figure_captions() -> dict[str, str]:
    """{stem: caption}, passed by the report rule to Snakemake's --report: workflow/report/figure.rst shows each
    PNG the caption of its stem."""
    return {stem: figure.caption for stem, figure in FIGURES.items()}


def figure_category(wildcards) -> str:
    """The section of Snakemake's --report of one PNG of reports/figures/, by the stem its pattern matched."""
    return FIGURES[wildcards.stem].category


_UNIT_SUFFIXES = (("_ms", " (ms)"), ("_nats", " (nats)"), ("_bits", " (bits)"), ("_pct", " (%)"),
                  ("_GB_per_s", " (GB/s)"), ("_per_s", " per s"))


def display_name(column) -> str:
    """The reader's name of a column: declared by a spec, else spelled out (underscores to spaces,
    units bracketed), so a new producer column still reads as words."""
    name = str(column)
    for spec in SPECS:
        if name in spec.columns:
            return spec.columns[name]
    for suffix, unit in _UNIT_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)].replace("_", " ") + unit
    return name.replace("_", " ")
