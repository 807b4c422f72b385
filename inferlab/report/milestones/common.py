"""What every milestone check shares: the Milestone record, a target row, the timing caveats.

A check decides: it returns a Milestone with status "pass", "fail" or "missing" and an evidence
record (a dataclass of typed fields per milestone, never prose). inferlab.report.narrative writes
the verdict, the headline, the targets table and the findings from that record.

A timing taken while other work loaded the machine is "contended"; a comparison whose timings
came from different nodes (a cluster executor) is "not comparable (different nodes)". Both are
evidence fields, stated in the verdict and the stamps, never silently averaged away. So is the count of
forwards that ran eagerly (op by op, outside any package) inside the compiled engine's timed rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd

from inferlab.experiments import MILESTONES
from inferlab.report.inputs import ReportInputs

PASS, FAIL, MISSING = "pass", "fail", "missing"
# The order engines are shown in: the seed-faithful eager engine first, then the compiled one.
ENGINE_ORDER = ("eager", "compiled")


@dataclass
class Target:
    """One row of a milestone's targets table: what was checked, our number, the limit it is held to
    (a target's, the roofline's or the seed page's: `limit_of`) and whether it is met (None: compared,
    not judged)."""
    target: str
    ours: object  # a number, a (low, high) range or text
    limit: object = None
    met: bool | None = None
    unit: str = ""
    limit_of: str = "target"
    roofline: float | None = None  # what an engine at this machine's roofline would reach, beside a target


@dataclass
class EagerCalls:
    """The forwards that ran eagerly (op by op, outside any compiled package) inside the compiled engine's
    timed rows, as the rows' eager_calls columns count them."""
    calls: int  # in all those rows
    rows_with: int  # rows with at least one
    rows: int  # rows counted
    uncounted: int = 0  # compiled rows without a count (from before the column)


@dataclass
class Timing:
    """The caveats of a milestone's timings."""
    contended: bool = False  # every timed row was measured while other work loaded the machine
    nodes: list[str] = field(default_factory=list)  # more than one: not comparable
    partly_contended: str = ""  # "3 of 24 timed rows": only the rows of the jobs that were contended
    eager_calls: EagerCalls | None = None  # None: no timed table the milestone reads counts them


@dataclass
class Stale:
    """Why a milestone's numbers must be rebuilt (opening.mark_stale): its stale inputs, each with the lineage
    check's reason, and what the checks said before staleness overrode them."""
    reasons: dict[str, str]  # input key -> why it is stale
    checked: str

    @property
    def inputs(self) -> list[str]:
        return list(self.reasons)


@dataclass
class Milestone:
    id: str
    title: str
    status: str
    evidence: object = None  # KvEvidence, SamplingEvidence, SpecEvidence, QuantEvidence; None when missing
    stamps: dict = field(default_factory=dict)
    missing_inputs: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # why a "fail" failed
    stale: Stale | None = None

    @property
    def name(self) -> str:
        """The title without its leading id, where the id is printed beside it (the cards)."""
        return self.title.removeprefix(f"{self.id} ")

    @property
    def verdict(self) -> str:
        from inferlab.report.narrative import verdict

        return verdict(self)

    @property
    def headline(self) -> str:
        """One sentence: the key number beside the seed page's."""
        from inferlab.report.narrative import headline

        return headline(self)


# ------------------------------------------------------------------------------------- engines


def engines_in(df: pd.DataFrame) -> list[str]:
    """The engines of a table's blocks (every timing producer writes `engine`), eager first."""
    found = [str(e) for e in dict.fromkeys(df["engine"].dropna())]
    return sorted(found, key=lambda e: ENGINE_ORDER.index(e) if e in ENGINE_ORDER else len(ENGINE_ORDER))


def engine_rows(df: pd.DataFrame, engine: str) -> pd.DataFrame:
    """The rows of one engine's block."""
    return df[df["engine"] == engine].reset_index(drop=True)


def engine_label(df: pd.DataFrame, engine: str) -> str:
    """'compiled' or, when the compile fell back, 'compiled (ran eager)'."""
    rows = engine_rows(df, engine)
    if "engine_used" in rows.columns and len(rows):
        used = str(rows["engine_used"].iloc[0])
        if used != engine:
            return f"{engine} (ran {used})"
    return engine


# ------------------------------------------------------------------------------------ caveats


def _nodes_of(value, found: set[str]) -> None:
    """Collects the `node` of every machine stamp nested in a provenance value."""
    if isinstance(value, dict):
        if value.get("node") and ("cpu_model" in value or "device" in value):
            found.add(str(value["node"]))
        for inner in value.values():
            _nodes_of(inner, found)


def compiled_eager_calls(tables: list[pd.DataFrame]) -> EagerCalls | None:
    """The eager calls in the compiled engine's rows of these tables (views that read `engine` and
    `eager_calls`; the others are skipped); None when no table counts them or none has a counted compiled row."""
    counts = [df.loc[df["engine"] == "compiled", "eager_calls"] for df in tables
              if {"engine", "eager_calls"} <= set(df.columns)]
    counts = pd.concat(counts, ignore_index=True) if counts else pd.Series(dtype=float)
    known = counts.dropna()
    if known.empty:
        return None
    return EagerCalls(int(known.sum()), int((known > 0).sum()), len(known), len(counts) - len(known))


def timing(data: ReportInputs, stamps: dict, milestone: str, eager_calls_in: tuple[str, ...] = ()) -> Timing:
    """The caveats of the milestone's timed tables: which rows were contended (each row carries its own job's
    flag; a table without the column counts as one row, flagged by its provenance), every node their
    provenance's machine stamps name (the main stamp and per-job ones), and the eager calls in the compiled
    rows of the tables `eager_calls_in` (compiled_eager_calls: the timed rows whose counts the milestone
    quotes, not a summary of them too). Marks stamps["contended"] only when every timed row was, and
    stamps["nodes"]."""
    flags, nodes, views = [], set(), []
    for key in [table.key for table in MILESTONES[milestone].tables if table.timed]:
        df, provenance = data.view(key), data.provenance.get(key, {})
        if df is not None and "contended" in df.columns:
            flags += df["contended"].fillna(False).astype(bool).tolist()
        elif df is not None or provenance:
            flags.append(bool(provenance.get("contended", False)))
        if df is not None and key in eager_calls_in:
            views.append(df)
        _nodes_of(provenance, nodes)
    everywhere = bool(flags) and all(flags)
    partly = f"{sum(flags)} of {len(flags)} timed rows" if any(flags) and not everywhere else ""
    caveat = Timing(everywhere, sorted(nodes), partly, compiled_eager_calls(views))
    if caveat.contended:
        stamps["contended"] = True
    if len(caveat.nodes) > 1:
        stamps["nodes"] = caveat.nodes
    return caveat


def checked(milestone: str, evidence, stamps: dict, problems: list[str], missing: Sequence[str] = ()) -> Milestone:
    """The milestone as decided: "missing" without some of its tables, else "pass", or "fail" with the
    problems that failed it."""
    status = MISSING if missing else FAIL if problems else PASS
    return Milestone(milestone, f"{milestone} {MILESTONES[milestone].milestone_title}", status, evidence, stamps,
                     list(missing), problems)


def missing_milestone(data: ReportInputs, milestone: str, stamps: dict) -> Milestone | None:
    """The milestone as "missing" when any table its spec requires is absent; else None."""
    missing = data.missing(*MILESTONES[milestone].required)
    return checked(milestone, None, stamps, [], missing) if missing else None
