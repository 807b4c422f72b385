"""How an experiment describes itself to the report and the review, once.

Each experiment's subpackage declares one `Spec` (for example `inferlab/kvcache/spec.py`): the
tables it produces and the rule that writes each, the headline metrics with their unit, noise and
direction, the display names of its columns, its export block, its figures and its milestone's
inputs. `inferlab/experiments.py` gathers them; the report rule, the milestones, the metrics
table, the exports, the appendix and the diff read only that.

Torch-free and import-free, so the report rule can read it at parse time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# How a metric's uncertainty was measured (the columns low/high of results/metrics.parquet):
NOISE_FLOOR = "noise_floor"  # a loss; low/high = value -/+ the training-noise floor
BOOTSTRAP_CI = "bootstrap_ci"  # a rate over samples; low/high = the 95% bootstrap CI of the mean
REP_RANGE = "rep_range"  # a timing; low/high = min/max over the reruns
EXACT = "exact"  # a deterministic number: any difference is real
# How a reader names each noise kind (the report's changes tables).
NOISE_WORDS = {NOISE_FLOOR: "± noise floor", BOOTSTRAP_CI: "95% bootstrap CI", REP_RANGE: "min–max over reruns",
               EXACT: "exact"}


def theirs(label: str) -> str:
    """The header of the seed page's value of `label` (their model, their machine), shown beside ours."""
    return f"{label}, seed page (theirs)"


def per_engine(label: str, engine: str, unit: str = "×") -> str:
    """One engine's column of a quantity measured on every engine ('measured, eager (×)')."""
    return f"{label}, {engine} ({unit})"


@dataclass(frozen=True)
class Table:
    key: str  # the name the report reads it by
    rule: str  # the rule that writes it ...
    output: str | int  # ... as this output of the rule
    title: str  # what it holds: the title of its appendix entry
    # The columns its milestone reads: its check sees only these (ReportInputs.view), and
    # tests/test_milestone_reads.py fails on one it never reads. Those ...
    reads: tuple[str, ...] = ()  # ... the table must have (a table lacking one is an error naming it)
    reads_if_present: tuple[str, ...] = ()  # ... it reads where the table has them (the check does without)
    timed: bool = False  # its timings carry the milestone's caveats (a `contended` column it declares, its nodes)


@dataclass(frozen=True)
class Metric:
    """Rows of results/metrics.parquet read from one column of one table, one row per table row.

    `key` and `text` are format strings over the row's columns ("{draft} k={k:.0f}"); a row with an
    `engine` gets " [engine]" appended to both (`by_engine=False`: to the text only). `name` may be
    "{metric}" for a long table.
    """

    name: str
    table: str
    column: str | None  # the value; None for a metric that is only text
    key: str
    unit: str = ""
    noise: str = EXACT
    higher_is_better: bool | Mapping[str, bool] | None = None  # a mapping: by metric name (long tables)
    timing: bool = False
    bounds: tuple[str, str] | None = None  # the low and high columns of a range
    spread: str | None = None  # a column holding the ± around the value (the noise floor)
    reps: str | None = None  # the rerun count a range needs to mean something
    where: tuple[str, object] | None = None  # only the rows whose column equals this value
    text: str | None = None  # text_value, a format like key
    once_per_key: bool = False  # the table repeats the value on several rows of one key
    by_engine: bool = True  # the key names the row's engine (else the text does)
    skip_missing: bool = False  # no row where the value is NaN or its column is absent
    experiment: str | None = None  # the metrics table's experiment, when not the spec's name


@dataclass(frozen=True)
class Figure:
    """One PNG of the report, reports/figures/<stem>.png (its key in `Spec.figures` is the stem), declared once:
    the report draws it and titles it from here, and Snakemake's --report files and captions it from here."""

    title: str
    category: str  # the section of Snakemake's --report
    caption: str  # what it draws, mark by mark (reStructuredText): its caption in Snakemake's --report
    # "module:function", the function taking the report's ReportInputs and returning PNG bytes. A name, not the
    # function, so that this module stays import-free; None: drawn by the review from the diff, not from the inputs.
    draw: str | None


@dataclass(frozen=True)
class Export:
    file: str  # "inference" (c13-inference.json) or "precomputed" (precomputed.json)
    section: str  # its key in that file
    tables: Mapping[str, str] | str  # name in the section -> table key; a bare key: the section is that table


@dataclass(frozen=True)
class Spec:
    name: str  # the `experiment` of its metrics rows
    tables: tuple[Table, ...]
    metrics: tuple[Metric, ...] = ()
    columns: Mapping[str, str] = field(default_factory=dict)  # column -> display name with unit
    figures: Mapping[str, Figure] = field(default_factory=dict)  # file stem -> figure
    exports: tuple[Export, ...] = ()
    milestone: str | None = None  # "M1": the milestone this experiment's tables decide
    milestone_title: str = ""  # what it checks (its title after the id)
    required: tuple[str, ...] = ()  # without these tables the milestone is "missing" (its check requires them)
    optional: tuple[str, ...] = ()  # read when present (a check degrades without them, never requires them)
    reviewed: tuple[str, ...] = ()  # the metric experiments the milestone's card summarises
    overlay: tuple[str, str] | None = None  # (metric, title): the changes figure's panel of this experiment
    body: tuple[str, ...] = ()  # its section's table: the columns, in order (those present)
    body_needs: tuple[str, ...] = ()  # without these tables its section says MISSING in the table's place

    @property
    def inputs(self) -> tuple[str, ...]:
        """Every table the milestone reads."""
        return self.required + self.optional
