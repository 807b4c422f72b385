"""“Changes since …”: one list of blocks, the report's section and the bundle's changes.md alike.

    python -m inferlab.report.changes [OLD] [NEW]   # the same section, as Markdown, to the terminal
    python -m inferlab.report.changes --pin         # refresh the reference pinned in git (tools/readme_results.py
                                                    # --pin does this and rewrites the README's results table)

OLD and NEW are metrics.parquet files or ledger entries (results/history/<run_id>/). NEW defaults
to results/metrics.parquet (else the latest ledger entry); OLD to the ledger entry before NEW,
else to the pinned reference reports/reference/metrics.parquet.

The comparison itself (verdicts, causes) is inferlab.review.diff's; how a cause reads is
inferlab.review.attribution's render(). This module only lays the rows out: counts, the
reproducibility line, then one folded line per cause with a short table of the metrics it moved.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

from inferlab.experiments import CHANGES_FIGURE, display_name
from inferlab.jobs.tables import write_table
from inferlab.report.page_markdown import markdown_page
from inferlab.report.render import Document
from inferlab.review import ledger
from inferlab.review.attribution import Cause, render
from inferlab.review.diff import (
    DEFAULT_HISTORY,
    DEFAULT_NEW,
    DEFAULT_REFERENCE,
    Changes,
    compare,
    config_of,
    default_new,
    default_old,
    label_of,
    load,
    record_of,
)
from inferlab.review.diff_summary import (
    brief_cause,
    cause_groups,
    cause_lines,
    counts,
    cut,
    needs_look,
    reproducibility_line,
    unexplained,
)
from inferlab.review.verdicts import NOT_COMPARABLE, missing
from inferlab.spec import NOISE_WORDS

LISTED = 8  # metrics shown under each cause; `--all` (listed=None) shows every one


def _first(rows: pd.DataFrame, listed: int | None) -> pd.DataFrame:
    return rows if listed is None else rows.head(listed)


def _value(value, text) -> object:
    if isinstance(text, str):
        return text
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def changes_table(shown: pd.DataFrame) -> pd.DataFrame:
    """Rows of the diff as a reader takes them in."""
    texts = shown["old_text"].notna() | shown["new_text"].notna()  # a status or a choice: no Δ
    return pd.DataFrame({
        "verdict": shown["verdict"], "experiment": shown["experiment"], "metric": shown["metric"].map(display_name),
        "key": shown["key"],
        "old": [_value(v, t) for v, t in zip(shown["old"], shown["old_text"], strict=True)],
        "new": [_value(v, t) for v, t in zip(shown["new"], shown["new_text"], strict=True)],
        "Δ": shown["delta"].mask(texts), "Δ%": shown["delta_pct"].mask(texts),
        "noise": [NOISE_WORDS.get(kind, kind) for kind in shown["noise_kind"]],
    })


def unexplained_warnings(diff: pd.DataFrame | None, listed: int = 3) -> list[tuple]:
    """One warning when a deterministic number moved with nothing recorded changed."""
    if diff is None or unexplained(diff).empty:
        return []
    rows = unexplained(diff)
    named = "; ".join(f"{r.experiment} {r.metric} {r.key} ({render(r.causes[0], with_kind=False)})"
                      for r in rows.head(listed).itertuples())
    more = f"; and {len(rows) - listed} more" if len(rows) > listed else ""
    return [("warning", f"Unexplained: {len(rows)} deterministic metric(s) moved and nothing recorded differs "
                        f"(code, config, inputs, machine): {named}{more}. The lab is not reproducible there; "
                        "see “Changes since …”.")]


def _cause_blocks(rows: pd.DataFrame, machine: Cause | None, listed: int | None) -> list[tuple]:
    """Per cause one line, its heading (cut to one line) and how many metrics it moved: one config edit is
    one line. Opened, the whole heading, each further cause on a line of its own and a short table of
    what it moved."""
    blocks: list[tuple] = []
    for _, causes, group in cause_groups(rows):
        heading, also = cause_lines(causes, machine)
        shown = _first(group, listed)
        more = f" (the first {len(shown)} of {len(group)})" if len(shown) < len(group) else ""
        inner = [("p", heading)] if cut(heading) != heading else []
        inner += [("cause", "Further causes", also)] if also else []
        blocks.append(("details", f"{cut(heading)} — moved {len(group)} metric(s)",
                       [*inner, ("table", changes_table(shown), f"Metrics with this cause{more}")]))
    return blocks


def not_comparable_line(rows: pd.DataFrame, machine: Cause | None = None) -> str:
    """'N timing metrics not comparable: another machine (fingerprint a → b)', the fingerprints cut to 8
    characters; without one pair of fingerprints (a contended job, probes that disagree), the rows'
    nearest causes."""
    pairs = {(str(a)[:8], str(b)[:8]) for a, b in zip(rows["fingerprint_old"], rows["fingerprint_new"], strict=True)
             if not missing(a) and not missing(b) and a != b}
    if len(pairs) == 1:
        (old, new), = pairs
        why = f"another machine (fingerprint {old} → {new})"
    else:
        why = "; ".join(dict.fromkeys(brief_cause(c, machine, with_more=False) for c in rows["causes"] if c))
    return f"{len(rows)} timing metric{'s' if len(rows) != 1 else ''} not comparable: {why}"


def change_groups(diff: pd.DataFrame, machine: Cause | None = None,
                  listed: int | None = LISTED) -> tuple[list[tuple], list[tuple]]:
    """(the timings that cannot be compared, the other changes by cause), each a line that opens. The
    first are expected there (another machine, a contended job), not changes: one line for all of them."""
    shown = needs_look(diff)
    incomparable = (shown["verdict"] == NOT_COMPARABLE) & shown["timing"]
    folded = _cause_blocks(shown[incomparable], machine, listed)
    changed = _cause_blocks(shown[~incomparable], machine, listed)
    rest = shown[shown["cause"].isna()]
    if len(rest):
        changed.append(("details", f"{len(rest)} metric(s) added or removed",
                        [("table", changes_table(_first(rest, listed)), "Added or removed metrics")]))
    return [("details", not_comparable_line(shown[incomparable], machine), folded)] if folded else [], changed


def changes_blocks(changes: Changes, listed: int | None = LISTED) -> list[tuple]:
    """The section: its heading, the counts, the reproducibility line, then one line per cause."""
    if changes.table is None:
        return [("h2", "Changes since …"), ("p", changes.reason or "Nothing to compare with."),
                ("figure", CHANGES_FIGURE, "No earlier run to compare with: this run's values only.")]
    tally = counts(changes.table)
    blocks = [
        ("h2", f"Changes since {changes.old_label}"),
        ("p", f"Comparing {changes.new_label} against {changes.old_label}, each metric against its own noise: "
              + ", ".join(f"{n} {v}" for v, n in tally.items() if n) + "."),
        ("p", reproducibility_line(changes.table, changes.old_label, changes.machine)),
        *([("p", changes.newer_code)] if changes.newer_code else []),
        *([("warning", changes.config_note)] if changes.config_note else []),
    ]
    folded, changed = change_groups(changes.table, changes.machine, listed)
    if not folded and not changed:
        # the overlay would show two equal bars per metric: the sentence says it (the PNG is still written)
        return blocks + [("p", "No metric changed beyond its noise.")]
    figure = ("figure", CHANGES_FIGURE, f"Old ({changes.old_label}) vs {changes.new_label}, with their noise")
    if not changed:  # only timings that cannot be compared: the overlay folds with them
        _, summary, groups = folded[0]
        return [*blocks, ("details", summary, [*groups, figure])]
    return blocks + folded + changed + [("details", "The overlay: old vs new", [figure])]


def changes_markdown(changes: Changes, listed: int | None = LISTED) -> str:
    """The section as Markdown, figures linked under figures/ (the bundle's layout)."""
    blocks = [*unexplained_warnings(changes.table), *changes_blocks(changes, listed)]
    return markdown_page(Document(f"Changes since {changes.old_label or '…'}", blocks))


# ---------------------------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inferlab.report.changes", description=__doc__.split("\n\n")[0])
    parser.add_argument("old", nargs="?", type=Path, help="metrics.parquet or ledger entry (default: previous run)")
    parser.add_argument("new", nargs="?", type=Path, help=f"metrics.parquet or ledger entry (default: {DEFAULT_NEW})")
    parser.add_argument("--history", type=Path, default=DEFAULT_HISTORY, help="the ledger directory")
    parser.add_argument("--reference", type=Path, default=DEFAULT_REFERENCE, help="the reference pinned in git")
    parser.add_argument("--all", action="store_true", help="list every metric under its cause, not the first few")
    parser.add_argument("--markdown", type=Path, help="also write the Markdown here")
    parser.add_argument("--table", type=Path, help="also write the diff table here (.parquet or .csv)")
    parser.add_argument("--figure", type=Path, help="also write the old/new overlay PNG here")
    parser.add_argument("--pin", action="store_true",
                        help="copy NEW (default: the latest run) to the reference and exit; then commit it")
    args = parser.parse_args(argv)
    try:
        if args.pin:
            source = args.old or default_new(args.history)
            write_table(load(source), args.reference,
                        provenance={"config_sha256": config_of(source), "causes": record_of(source)})
            print(f"pinned {label_of(source)} as {args.reference}; commit it: git add -f {args.reference}")
            return 0
        new_path = args.new or default_new(args.history)
        new_table = load(new_path)
        old_path = args.old or default_old(new_path, new_table, args.history, args.reference)
        old_table = load(old_path)
    except (FileNotFoundError, KeyError, ledger.UnreadableRecord) as err:
        print(f"inferlab.report.changes: {err}", file=sys.stderr)
        return 2
    changes = compare(old_path, old_table, new_table, record_of(new_path), label_of(new_path), config_of(new_path))
    markdown = changes_markdown(changes, listed=None if args.all else LISTED)
    print(markdown)
    for path, content in ((args.markdown, markdown.encode("utf-8")), (args.figure, changes.figure_png)):
        if path:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
    diff = changes.table.drop(columns="causes")  # the records stay in memory; a file holds their text, `cause`
    if args.table and args.table.suffix == ".csv":
        diff.to_csv(args.table, index=False)
    elif args.table:
        write_table(diff, args.table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
