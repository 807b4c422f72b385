"""How a diff reads: the counts, the reproducibility line, the changes grouped by cause (Markdown),
and one line per milestone card."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from inferlab.experiments import MILESTONES
from inferlab.review.attribution import CAUSE_ORDER, MACHINE, UNEXPLAINED, Cause, render
from inferlab.review.metrics import IDENTICAL_RTOL, SUMMATION_RTOL, missing
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

# A card names a few metrics, each with its nearest cause cut to this, and a folded cause line in
# "Changes since …" its heading; opened, the section has them in full.
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


def reproducibility_line(diff: pd.DataFrame, old_label: str, machine: str | None = None) -> str:
    """"N of M deterministic metrics identical to …; K agree within …"; `machine` names how the machines differ."""
    r = reproducibility(diff)
    where = f" (another machine: {machine})" if machine else " (the same machine)"
    within = (f"; {r['within_tolerance']} agree within float summation order (at most {fmt(r['largest_within'])} "
              f"relative; the tolerance is {fmt(IDENTICAL_RTOL)} on one machine, {fmt(SUMMATION_RTOL)} across CPUs)"
              if r["within_tolerance"] else "")
    beyond = f"; {r['differ']} differ beyond that, each with its cause" if r["differ"] else ""
    return f"{r['identical']} of {r['total']} deterministic metrics identical to {old_label}{where}{within}{beyond}."


def cause_groups(diff: pd.DataFrame) -> list[tuple[str, tuple[Cause, ...], pd.DataFrame]]:
    """(kind, causes, their metrics) per distinct set of causes, unexplained first, then most specific first."""
    caused = diff[diff["cause"].notna()]
    groups = [(str(kind), rows["causes"].iloc[0], rows)
              for (kind, _), rows in caused.groupby(["cause_kind", "cause"], sort=False)]
    return sorted(groups, key=lambda g: (CAUSE_ORDER.index(g[0]) if g[0] in CAUSE_ORDER else len(CAUSE_ORDER),
                                         -len(g[2]), g[2]["cause"].iloc[0]))


def cause_lines(causes: tuple[Cause, ...], machine: str | None = None) -> tuple[str, list[str]]:
    """A group's causes as a reader takes them in: the most specific as the heading, then one line for
    each further cause. An input reads with what moved it after a dash; the jobs that ran on the
    machine change named above the groups (`machine`) share one line that names them."""
    lines: list[str] = []
    jobs_on_that_machine: list[str] = []
    machine_line_at = 0  # where the first such job's cause stood
    for cause in causes:
        if cause.kind == MACHINE and cause.rule and render(replace(cause, rule=None), with_kind=False) == machine:
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


def brief_cause(causes: tuple[Cause, ...], machine: str | None = None, with_more: bool = True) -> str:
    """A metric's causes as a milestone card shows them: the nearest cause, cut to CARD_CAUSE_CHARS,
    and (with_more) how many further causes the "Changes since …" section below lists."""
    heading, also = cause_lines(causes, machine)
    text = cut(heading)
    more = f" (+{len(also)} more cause{'s' if len(also) > 1 else ''} below)" if also and with_more else ""
    return text + more


def _fmt(value, text=None) -> str:
    if not missing(text):
        return str(text)
    return "–" if missing(value) else fmt(float(value))


def _signed(value, suffix: str = "") -> str:
    return "–" if missing(value) else fmt(value, "+") + suffix


def counts(diff: pd.DataFrame) -> dict[str, int]:
    return {v: int((diff["verdict"] == v).sum()) for v in VERDICT_ORDER}


def _markdown_rows(rows: pd.DataFrame) -> list[str]:
    lines = ["| verdict | experiment | metric | key | old | new | Δ | Δ% | noise |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows.itertuples():
        unit = f" {r.unit}" if isinstance(r.unit, str) and r.unit else ""
        texts = not (missing(r.old_text) and missing(r.new_text))  # a status or a choice: no Δ
        delta, pct = (math.nan, math.nan) if texts else (r.delta, r.delta_pct)
        lines.append(f"| **{r.verdict}** | {r.experiment} | {r.metric} | {r.key} | {_fmt(r.old, r.old_text)} | "
                     f"{_fmt(r.new, r.new_text)} | {_signed(delta, unit)} | {_signed(pct, '%')} | "
                     f"{r.noise_kind} |")
    return lines


def needs_look(diff: pd.DataFrame) -> pd.DataFrame:
    """What the diff shows: every verdict in SHOWN and every deterministic metric that differs."""
    return diff[diff["verdict"].isin(SHOWN) | diff["cause"].notna()]


def unexplained(diff: pd.DataFrame) -> pd.DataFrame:
    return diff[diff["cause_kind"] == UNEXPLAINED]


def to_markdown(diff: pd.DataFrame, old_label: str, new_label: str, show_all: bool = False,
                note: str | None = None, machine: str | None = None, listed: int = 12,
                newer: str | None = None) -> str:
    """The "Changes since …" section: counts, the reproducibility line, any note, then one group per
    cause (unexplained first) with the metrics it moved; added and removed metrics last."""
    tally = counts(diff)
    lines = [f"## Changes since {old_label}", "",
             f"Comparing **{new_label}** against **{old_label}**: "
             + ", ".join(f"{n} {v}" for v, n in tally.items() if n) + ".", "",
             reproducibility_line(diff, old_label, machine), "", *([newer, ""] if newer else [])]
    if len(unexplained(diff)):
        lines += [f"> **Warning: {len(unexplained(diff))} unexplained change(s).** A deterministic number moved "
                  "and nothing recorded differs: the lab is not reproducible at that point.", ""]
    if note:
        lines += [f"> **{note}**", ""]
    shown = diff if show_all else needs_look(diff)
    if shown.empty:
        lines.append("No metric changed beyond its noise.")
        return "\n".join(lines) + "\n"
    for _, causes, rows in cause_groups(shown):
        more = len(rows) - listed if not show_all and len(rows) > listed else 0
        heading, also = cause_lines(causes, machine)
        lines += [f"### {heading}", "", *(["Also:", "", *[f"- {line}" for line in also], ""] if also else []),
                  f"{len(rows)} metric(s):", "", *_markdown_rows(rows if show_all else rows.head(listed))]
        lines += ["", f"… and {more} more (`--all` lists them)."] if more else []
        lines.append("")
    rest = shown[shown["cause"].isna()]
    if len(rest):
        lines += ["### without a cause to name (added, removed, or within noise)", "", *_markdown_rows(rest), ""]
    hidden = len(diff) - len(shown)
    if hidden:
        lines += [f"{hidden} more metrics within noise, unchanged or without a noise estimate "
                  "(`--all` lists them)."]
    return "\n".join(lines).rstrip() + "\n"


def milestone_change_lines(diff: pd.DataFrame, listed: int = 3, machine: str | None = None,
                           other_config: bool = False) -> dict[str, str]:
    """One line per milestone for its card: a flip, the first few changes each with its nearest
    cause, the rest as counts. Against a run of another configuration, where any metric may move with
    it, a card lists only the unexplained changes and counts the rest: "Changes since …" gives each its cause."""
    lines = {}
    for milestone, spec in MILESTONES.items():
        status = diff[(diff.experiment == "milestones") & (diff.key == milestone)]
        rows = diff[diff.experiment.isin(spec.reviewed)]
        parts = []
        if not status.empty and status.iloc[0].verdict == FLIPPED:
            parts.append(f"flipped {status.iloc[0].old_text} → {status.iloc[0].new_text}")
        changes = rows[(rows.verdict == CHANGED) | (rows.cause_kind == UNEXPLAINED)]
        shown = (changes[changes.cause_kind == UNEXPLAINED] if other_config else changes).head(listed)
        for r in shown.itertuples():
            text = (f"{_fmt(r.old, r.old_text)} → {_fmt(r.new, r.new_text)}" if not missing(r.new_text)
                    or not missing(r.old_text) else f"{_signed(r.delta)} ({_signed(r.delta_pct, '%')})")
            parts.append(f"{r.metric} {r.key}: {text}"
                         + (f" [{brief_cause(r.causes, machine)}]" if r.causes else ""))
        if len(changes) > len(shown):
            parts.append(f"{len(changes) - len(shown)}{' more' if len(shown) else ''} changed")
        tally = counts(rows)
        rest = ", ".join(f"{tally[v]} {v}" for v in (ADDED, REMOVED, NOT_COMPARABLE, WITHIN) if tally[v])
        incomparable = [c for c in rows[rows.verdict == NOT_COMPARABLE]["causes"] if c]
        if incomparable and all(c[0].kind == MACHINE for c in incomparable):
            rest += " [another machine]"  # which, "Changes since …" says in one line
        elif incomparable:
            briefs = list(dict.fromkeys(brief_cause(c, machine, with_more=False) for c in incomparable))
            rest += f" [{briefs[0]}{'; …' if len(briefs) > 1 else ''}]"
        if rows.empty and status.empty:
            lines[milestone] = "nothing to compare"
        elif parts:
            lines[milestone] = "; ".join(parts + ([rest] if rest else []))
        else:
            lines[milestone] = "no change beyond noise" + (f" ({rest})" if rest else "")
    return lines
