"""The default sampling setting by the old threshold rule (config default_rule.kind
"max_in_corpus_drop"), chosen from the repetition summary; torch-free."""

from __future__ import annotations

import pandas as pd

from inferlab.sampling.grid import GREEDY
from inferlab.sampling.summary_table import wide_summary


def rule_text(max_in_corpus_drop: float) -> str:
    return (f"default = the sampling cell (greedy excluded: a sampling default must sample) with the "
            f"lowest mean seq-rep-4 among cells whose mean in-corpus 4-gram share is >= greedy's "
            f"minus {max_in_corpus_drop:g}; cells whose mean seq-rep-4 lies inside the lowest cell's "
            f"95% CI count as tied, and the tie goes to the higher in-corpus share. The rule picks the best "
            f"top-p cell and the best min-p cell separately; min-p replaces top-p only if its best "
            f"cell has lower seq-rep-4, an in-corpus share >= the top-p cell's, and a seq-rep-4 gap "
            f"beyond noise (its 95% CI high below the top-p cell's CI low). If no cell meets the "
            f"share floor, the cell with the highest share is taken and rule_satisfied is false.")


def _best(cells: pd.DataFrame, floor: float) -> tuple[str | None, bool]:
    """Lowest seq-rep-4 among cells at or above the share floor.

    Many sampled cells sit near zero repetition, so a bare minimum would be decided by noise:
    cells whose mean lies inside the lowest cell's bootstrap CI are tied, and the tie goes to
    the higher in-corpus share (then config order).
    """
    if cells.empty:
        return None, False
    eligible = cells[cells["in_corpus_4gram_share"] >= floor]
    if eligible.empty:
        return str(cells["in_corpus_4gram_share"].idxmax()), False
    ranked = eligible.assign(_order=range(len(eligible))).sort_values(
        ["seq_rep_4", "in_corpus_4gram_share", "_order"], ascending=[True, False, True], kind="stable")
    tied = ranked[ranked["seq_rep_4"] <= ranked["seq_rep_4_ci_high"].iloc[0]]
    best = tied.sort_values(["in_corpus_4gram_share", "_order"], ascending=[False, True], kind="stable")
    return str(best.index[0]), True


def choose_default(summary: pd.DataFrame, distribution: pd.DataFrame,
                   max_in_corpus_drop: float) -> dict:
    """Apply the config rule to the repetition summary; returns one flat record with the numbers used.

    summary: the tidy table of `summarise` (must contain the greedy cell);
    distribution: the next-token table (cell, kept, entropy_nats, entropy_bits).
    """
    cells = wide_summary(summary)
    if GREEDY not in cells.index:
        raise ValueError("the repetition summary has no greedy cell to compare against")
    greedy_row = cells.loc[GREEDY]
    sampled = cells["truncation"].isin(["top_p", "min_p"])
    floor = float(greedy_row["in_corpus_4gram_share"]) - max_in_corpus_drop
    best_top_p, ok_top_p = _best(cells[cells["truncation"] == "top_p"], floor)
    best_min_p, ok_min_p = _best(cells[cells["truncation"] == "min_p"], floor)
    if best_top_p is None and best_min_p is None:
        raise ValueError("no sampling cells besides greedy")
    dist = distribution.set_index("cell")

    def numbers(prefix: str, cell: str | None) -> dict:
        """The numbers of one cell that the decision used, NaN / -1 where there is no such cell."""
        row = cells.loc[cell] if cell is not None else None
        in_dist = cell is not None and cell in dist.index
        values = {"cell": cell}
        for key in ("seq_rep_4", "seq_rep_4_ci_low", "seq_rep_4_ci_high", "in_corpus_4gram_share",
                    "in_corpus_4gram_share_ci_low", "in_corpus_4gram_share_ci_high", "distinct_2"):
            values[key] = float(row[key]) if row is not None else float("nan")
        values["kept"] = int(dist.loc[cell, "kept"]) if in_dist else -1
        for key in ("entropy_nats", "entropy_bits"):
            values[key] = float(dist.loc[cell, key]) if in_dist else float("nan")
        return {f"{prefix}_{key}": value for key, value in values.items()}

    if best_min_p is None:
        switch, reason = False, "no min-p cells in the grid"
    elif best_top_p is None:
        switch, reason = True, "no top-p cells in the grid"
    else:
        tp, mp = cells.loc[best_top_p], cells.loc[best_min_p]
        lower = mp["seq_rep_4"] < tp["seq_rep_4"]
        share_ok = mp["in_corpus_4gram_share"] >= tp["in_corpus_4gram_share"]
        beyond_noise = mp["seq_rep_4_ci_high"] < tp["seq_rep_4_ci_low"]
        switch = bool(lower and share_ok and beyond_noise and ok_min_p)
        reason = (f"min-p {best_min_p}: seq-rep-4 {mp['seq_rep_4']:.3f} "
                  f"[{mp['seq_rep_4_ci_low']:.3f}, {mp['seq_rep_4_ci_high']:.3f}], in-corpus "
                  f"{mp['in_corpus_4gram_share']:.3f} vs top-p {best_top_p}: seq-rep-4 "
                  f"{tp['seq_rep_4']:.3f} [{tp['seq_rep_4_ci_low']:.3f}, {tp['seq_rep_4_ci_high']:.3f}], "
                  f"in-corpus {tp['in_corpus_4gram_share']:.3f}; lower seq-rep-4: {bool(lower)}, "
                  f"share >= top-p's: {bool(share_ok)}, gap beyond the CIs: {bool(beyond_noise)}, "
                  f"min-p meets the share floor: {ok_min_p}")
    chosen = best_min_p if switch else best_top_p
    row = cells.loc[chosen]
    chosen_numbers = numbers("chosen", chosen)
    return {
        "kind": "max_in_corpus_drop",
        "cell": chosen, "truncation": row["truncation"], "temperature": float(row["temperature"]),
        "top_p": float(row["top_p"]), "min_p": float(row["min_p"]),
        "rule": rule_text(max_in_corpus_drop), "max_in_corpus_drop": float(max_in_corpus_drop),
        "rule_satisfied": bool(ok_min_p if switch else ok_top_p),
        **{key.removeprefix("chosen_"): value for key, value in chosen_numbers.items() if key != "chosen_cell"},
        "greedy_seq_rep_4": float(greedy_row["seq_rep_4"]),
        "greedy_in_corpus_4gram_share": float(greedy_row["in_corpus_4gram_share"]),
        "in_corpus_floor": floor,
        "eligible_cells": int((sampled & (cells["in_corpus_4gram_share"] >= floor)).sum()),
        "sampling_cells": int(sampled.sum()),
        **numbers("best_top_p", best_top_p), **numbers("best_min_p", best_min_p),
        "min_p_decision": "switch to min-p" if switch else "keep top-p",
        "min_p_reason": reason,
    }
