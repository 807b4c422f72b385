"""The report's figures: file stem -> title and category, defined once.

Light on purpose (no matplotlib): the report rule imports it at parse time to declare one PNG
per figure, with its category in Snakemake's own report; figures.py draws exactly these.
"""

from __future__ import annotations

from typing import NamedTuple


class Figure(NamedTuple):
    title: str
    category: str  # the section of Snakemake's --report


FIGURE_CATALOG = {
    "training_curves": Figure("Training: loss curves of the three models", "Setup"),
    "kvcache_ratio": Figure("KV cache: speed ratio vs generated length", "1 KV cache"),
    "sampling_heatmaps": Figure("Sampling: entropy and kept tokens over the grid", "2 Sampling"),
    "sampling_repetition": Figure("Sampling: repetition against in-corpus 4-grams per cell, by temperature",
                                  "2 Sampling"),
    "speculative_yield": Figure("Speculative: yield per round and wall-clock speedup, measured vs formula",
                                "3 Speculative"),
    "quant_delta": Figure("Quantization: validation-loss increase per scheme", "4 Quantization"),
    # drawn by inferlab.review.diff from this run's and the previous run's metrics tables, not by figures.py
    "changes_overlay": Figure("Changes: old vs new KV-cache ratios and quantization Δloss", "Review"),
}
