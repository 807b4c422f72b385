"""What every milestone check shares: the Milestone record and the timing caveats of its verdict.

A timing taken while other work loaded the machine is "contended"; a comparison whose timings
came from different nodes (a cluster executor) is "not comparable (different nodes)". Both are
stated in the verdict and the stamps, never silently averaged away.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from inferlab.experiments import MILESTONES
from inferlab.report.inputs import ReportInputs

PASS, FAIL, MISSING = "pass", "fail", "missing"
# The order engines are shown in: the seed-faithful eager engine first, then the compiled one.
ENGINE_ORDER = ("eager", "compiled")


@dataclass
class Milestone:
    id: str
    title: str
    status: str
    verdict: str
    evidence: dict = field(default_factory=dict)
    stamps: dict = field(default_factory=dict)
    missing_inputs: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # why a "fail" failed
    headline: str = ""  # one sentence: the key number beside the seed page's

    @property
    def name(self) -> str:
        """The title without its leading id, where the id is printed beside it (the cards)."""
        return self.title.removeprefix(f"{self.id} ")

    @property
    def verdict_parts(self) -> list[str | list[str]]:
        """The verdict as Markdown writes it: paragraphs (split at blank lines) as text, and the lines of a
        paragraph that start with "- " as a bulleted list (a list of items)."""
        parts: list[str | list[str]] = []
        for paragraph in self.verdict.strip().split("\n\n"):
            lines = paragraph.strip().splitlines()
            lead = [line for line in lines if not line.startswith("- ")]
            items = [line[2:] for line in lines if line.startswith("- ")]
            if lead:
                parts.append(" ".join(lead))
            if items:
                parts.append(items)
        return parts

    @property
    def verdict_line(self) -> str:
        """The verdict on one line, for a table cell: each list item after its lead, joined by '; '."""
        return " ".join(part if isinstance(part, str) else "; ".join(part) for part in self.verdict_parts)


def bool_all(series: pd.Series) -> bool:
    return bool(series.astype(bool).all())


# ------------------------------------------------------------------------------------- engines


def engines_in(df: pd.DataFrame) -> list[str]:
    """The engines of a table's blocks (every timing producer writes `engine`), eager first."""
    found = [str(e) for e in dict.fromkeys(df["engine"].dropna())]
    return sorted(found, key=lambda e: ENGINE_ORDER.index(e) if e in ENGINE_ORDER else len(ENGINE_ORDER))


def engine_rows(df: pd.DataFrame | None, engine: str) -> pd.DataFrame | None:
    """The rows of one engine's block."""
    if df is None:
        return None
    return df[df["engine"] == engine].reset_index(drop=True)


def engine_label(df: pd.DataFrame, engine: str) -> str:
    """'compiled' or, when the compile fell back, 'compiled (ran eager)'."""
    rows = engine_rows(df, engine)
    if rows is not None and "engine_used" in rows.columns and len(rows):
        used = str(rows["engine_used"].iloc[0])
        if used != engine:
            return f"{engine} (ran {used})"
    return engine


# ------------------------------------------------------------------------------------ caveats


def contended(data: ReportInputs, *keys: str) -> bool:
    """Whether any of the tables' timings were flagged contended (column or provenance)."""
    for key in keys:
        df = data.table(key)
        if df is not None and "contended" in df.columns and bool(df["contended"].fillna(False).astype(bool).any()):
            return True
        if bool(data.provenance.get(key, {}).get("contended", False)):
            return True
    return False


def _nodes_of(value, found: set[str]) -> None:
    """Collects the `node` of every machine stamp nested in a provenance value."""
    if isinstance(value, dict):
        if value.get("node") and ("cpu_model" in value or "device" in value):
            found.add(str(value["node"]))
        for inner in value.values():
            _nodes_of(inner, found)


def nodes_in(data: ReportInputs, *keys: str) -> list[str]:
    """Every node named by a machine stamp in the tables' provenance (the main stamp and per-job ones)."""
    found: set[str] = set()
    for key in keys:
        _nodes_of(data.provenance.get(key, {}), found)
    return sorted(found)


def caveats(data: ReportInputs, stamps: dict, *keys: str) -> str:
    """The verdict's caveat sentences; also marks stamps["contended"] and stamps["nodes"]."""
    text = ""
    if contended(data, *keys):
        stamps["contended"] = True
        text += (" Timings contended: other work loaded the machine while they ran, so these numbers are not "
                 "comparable with an idle run.")
    nodes = nodes_in(data, *keys)
    if len(nodes) > 1:
        stamps["nodes"] = nodes
        text += f" Not comparable (different nodes): the timings compared here ran on {', '.join(nodes)}."
    return text


def missing_milestone(data: ReportInputs, milestone: str, title: str, stamps: dict) -> Milestone | None:
    """The milestone as "missing" when any table its spec requires is absent; else None."""
    missing = data.missing(*MILESTONES[milestone].required)
    if not missing:
        return None
    return Milestone(milestone, title, MISSING, f"Missing inputs: {', '.join(missing)}.", stamps=stamps,
                     missing_inputs=missing)
