"""How a diff reads: the counts, the reproducibility line, the changes grouped by cause and one line per
milestone card (inferlab.report.changes lays the groups out as the report's section)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from inferlab.experiments import MILESTONES
from inferlab.review.attribution import CAUSE_ORDER, MACHINE, UNEXPLAINED, Cause, render
from inferlab.review.metrics import IDENTICAL_RTOL, SUMMATION_RTOL
from inferlab.review.numbers import fmt
from inferlab.review.verdicts import (
    ADDED,
    CHANGED,
    FLIPPED,
    NOT_COMPARABLE,
    REMOVED,
    SHOWN,
    VERDICT_ORDER,
    WITHIN,
    same,
)

# A card names each nearest cause cut to this, and a folded cause line in "Changes since …" its heading;
# opened, the section has them in full.
CARD_CAUSE_CHARS = 80


def reproducibility(diff: pd.DataFrame) -> dict:
    """Over the deterministic metrics in both runs: how many are identical, within their tolerance (summation
    order), or differ."""
    both = diff[~diff["timing"] & (diff["experiment"] != "milestones") & ~diff["verdict"].isin([ADDED, REMOVED])]
    exact = [same(a, b) and same(at, bt) for a, b, at, bt in
             zip(both["old"], both["new"], both["old_text"], both["new_text"], strict=True)]
    differ = both["deterministic_differs"].to_numpy(dtype=bool)
    close = ~np.array(exact, dtype=bool) & ~differ
    with np.errstate(divide="ignore", invalid="ignore"):
        relative = (both["delta"].abs() / np.maximum(both["old"].abs(), both["new"].abs()))[close]
    return {"total": len(both), "identical": int(sum(exact)), "within_tolerance": int(close.sum()),
            "largest_within": float(relative.max()) if close.any() else None, "differ": int(differ.sum())}


def reproducibility_line(diff: pd.DataFrame, old_label: str, machine: Cause | None = None) -> str:
    """"N of M deterministic metrics identical to …; K agree within …"; `machine`: how the machines differ."""
    r = reproducibility(diff)
    where = f" (another machine: {render(machine, with_kind=False)})" if machine else " (the same machine)"
    within = (f"; {r['within_tolerance']} agree within float summation order (at most {fmt(r['largest_within'])} "
              f"relative; the tolerance is {fmt(IDENTICAL_RTOL)} on one machine, {fmt(SUMMATION_RTOL)} across CPUs)"
              if r["within_tolerance"] else "")
    beyond = f"; {r['differ']} differ beyond that, each with its cause" if r["differ"] else ""
    return f"{r['identical']} of {r['total']} deterministic metrics identical to {old_label}{where}{within}{beyond}."


def cause_groups(diff: pd.DataFrame) -> list[tuple[str, tuple[Cause, ...], pd.DataFrame]]:
    """(kind, causes, their metrics) per distinct set of causes, unexplained first, then most specific first."""
    caused = diff[diff["cause"].notna()]
    identity = caused["causes"].map(lambda causes: tuple(c.identity for c in causes))
    groups = [(rows["causes"].iloc[0][0].kind, rows["causes"].iloc[0], rows)
              for _, rows in caused.groupby(identity, sort=False)]
    return sorted(groups, key=lambda g: (CAUSE_ORDER.index(g[0]) if g[0] in CAUSE_ORDER else len(CAUSE_ORDER),
                                         -len(g[2]), g[2]["cause"].iloc[0]))


def cause_lines(causes: tuple[Cause, ...], machine: Cause | None = None) -> tuple[str, list[str]]:
    """A group's causes as a reader takes them in: the most specific as the heading, then one line for
    each further cause. An input reads with what moved it after a dash; the jobs that ran on the
    machine change named above the groups (`machine`) share one line that names them."""
    lines: list[str] = []
    jobs_on_that_machine: list[str] = []
    machine_line_at = 0  # where the first such job's cause stood
    for cause in causes:
        if machine and cause.kind == MACHINE and cause.rule and replace(cause, rule=None).identity == machine.identity:
            machine_line_at = machine_line_at if jobs_on_that_machine else len(lines)
            jobs_on_that_machine.append(cause.rule)
        else:
            lines.append(render(cause, input_joiner=" — from "))
    if jobs_on_that_machine:
        names = ", ".join(jobs_on_that_machine[:-1]) + " and " if len(jobs_on_that_machine) > 1 else ""
        lines.insert(machine_line_at, f"{MACHINE}: {names}{jobs_on_that_machine[-1]} ran on the other machine "
                                      "named above")
    return lines[0], lines[1:]


def cut(text: str) -> str:
    """text as a one-line summary shows it: at most CARD_CAUSE_CHARS, an ellipsis where it was cut."""
    return text if len(text) <= CARD_CAUSE_CHARS else text[:CARD_CAUSE_CHARS - 1].rstrip() + "…"


def brief_cause(causes: tuple[Cause, ...], machine: Cause | None = None, with_more: bool = True) -> str:
    """A metric's causes as a milestone card shows them: the nearest cause, cut to CARD_CAUSE_CHARS,
    and (with_more) how many further causes the "Changes since …" section below lists."""
    heading, also = cause_lines(causes, machine)
    text = cut(heading)
    more = f" (+{len(also)} more cause{'s' if len(also) > 1 else ''} below)" if also and with_more else ""
    return text + more


def counts(diff: pd.DataFrame) -> dict[str, int]:
    return {v: int((diff["verdict"] == v).sum()) for v in VERDICT_ORDER}


def needs_look(diff: pd.DataFrame) -> pd.DataFrame:
    """What the diff shows: every verdict in SHOWN and every deterministic metric that differs."""
    return diff[diff["verdict"].isin(SHOWN) | diff["cause"].notna()]


def unexplained(diff: pd.DataFrame) -> pd.DataFrame:
    return diff[diff["cause_kind"] == UNEXPLAINED]


def milestone_change_lines(diff: pd.DataFrame, machine: Cause | None = None, named: int = 3) -> dict[str, str]:
    """One line per milestone for its card: a flip, the counts, and each nearest cause of what moved, once (the
    first `named` of them, the rest counted); "Changes since …" below lists the metrics under each cause."""
    lines = {}
    for milestone, spec in MILESTONES.items():
        status = diff[(diff.experiment == "milestones") & (diff.key == milestone)]
        rows = diff[diff.experiment.isin(spec.reviewed)]
        if rows.empty and status.empty:
            lines[milestone] = "nothing to compare"
            continue
        flip = status[status.verdict == FLIPPED]
        parts = [f"flipped {flip.iloc[0].old_text} → {flip.iloc[0].new_text}"] if len(flip) else []
        tally = counts(rows)
        parts += [", ".join(f"{tally[v]} {v}" for v in (CHANGED, NOT_COMPARABLE, ADDED, REMOVED, WITHIN) if tally[v])
                  or "no change beyond noise"]
        moved = rows[rows.verdict.isin([CHANGED, NOT_COMPARABLE]) | (rows.cause_kind == UNEXPLAINED)]
        nearest = list(dict.fromkeys(brief_cause(c, machine, with_more=False)
                                     for c in {c[0].identity: c for c in moved["causes"] if c}.values()))
        if nearest:
            more = f"; and {len(nearest) - named} more" if len(nearest) > named else ""
            parts.append(f"cause{'s' if len(nearest) > 1 else ''}: {'; '.join(nearest[:named])}{more} "
                         "(“Changes since …” lists the metrics)")
        lines[milestone] = "; ".join(parts)
    return lines
