"""Experiment 2, sampling settings, as the report and the review read them."""

from __future__ import annotations

from inferlab.sampling.grid import GREEDY, HUMAN
from inferlab.spec import BOOTSTRAP_CI, Export, Figure, Metric, Spec, Table, theirs

SEED_KEPT = theirs("kept")
# The rows of the cell table named for what they are (the other rows are cells, by id).
ROW_NAMES = {GREEDY: "greedy (baseline)", HUMAN: "reference: validation text (human)"}
# The appendix's example texts, and the distribution table's columns the sampling workbench recomputes.
EXAMPLE_COLUMNS = ("cell", "source", "prompt", "sample", "seq_rep_4", "in_corpus_4gram_share", "text")
GRID_COLUMNS = ("cell", "truncation", "temperature", "top_p", "min_p", "entropy_nats", "entropy_bits", "kept")

# Which way each repetition metric is better; a metric not listed (a new one) has no direction.
REPETITION_DIRECTION = {"seq_rep_4": False, "distinct_1": True, "distinct_2": True,
                        "in_corpus_4gram_share": True, "nll_per_token": False}

SPEC = Spec(
    name="sampling",
    tables=(
        Table("sp_logits", "sampling_distribution", "logits", "Sampling: the exported next-token logits"),
        Table("sp_distribution", "sampling_distribution", "table", "Sampling: next-token distribution per cell",
              reads=("cell", "truncation", "temperature", "top_p", "min_p", "entropy_nats", "kept")),
        Table("sp_repetition", "sampling_repetition", "summary", "Sampling: repetition metrics per cell (long form)",
              reads=("cell", "truncation", "temperature", "top_p", "min_p", "metric", "mean", "ci_low", "ci_high")),
        Table("sp_samples", "sampling_repetition", "examples", "Sampling: example texts"),
        # the default record (threshold_rule.choose_default or human_match.choose_human_match): each rule's numbers
        # are read where its record has them
        Table("sp_default", "sampling_default", "default", "Sampling: the default and the min-p decision",
              reads=("kind", "cell", "rule", "rule_satisfied", "min_p_decision", "min_p_reason"),
              reads_if_present=("distance", "distance_ci_low", "distance_ci_high", "closest_cell", "runner_up_cell",
                                "runner_up_distance", "greedy_distance", "seq_rep_4", "in_corpus_4gram_share",
                                "in_corpus_floor")),
        Table("sp_distance", "sampling_default", "distances", "Sampling: distance of each cell to held-out human text",
              reads=("cell", "distance")),
    ),
    metrics=(
        Metric("entropy_bits", "sp_distribution", "entropy_bits", "{cell}", "bits"),
        Metric("kept", "sp_distribution", "kept", "{cell}", "tokens"),
        Metric("{metric}", "sp_repetition", "mean", "{cell}", noise=BOOTSTRAP_CI, bounds=("ci_low", "ci_high"),
               higher_is_better=REPETITION_DIRECTION),
        Metric("default_cell", "sp_default", None, "chosen", text="{cell}"),
        Metric("min_p_decision", "sp_default", None, "chosen", text="{min_p_decision}", skip_missing=True),
    ),
    columns={
        "temperature": "temperature", "top_p": "top-p", "min_p": "min-p", "truncation": "truncation",
        "cell": "cell", "prompt": "prompt", "sample": "sample", "text": "text", "eligible": "eligible",
        "chosen": "chosen", "entropy_bits": "entropy (bits)", "entropy_nats": "entropy (nats)", "kept": "tokens kept",
        "seq_rep_4": "4-gram repetition", "seq_rep_4_ci_low": "4-gram repetition CI low",
        "seq_rep_4_ci_high": "4-gram repetition CI high", "distinct_1": "distinct-1", "distinct_2": "distinct-2",
        "in_corpus_4gram_share": "in-corpus 4-gram share", "in_corpus_4gram_share_ci_low": "in-corpus 4-gram CI low",
        "in_corpus_4gram_share_ci_high": "in-corpus 4-gram CI high", "nll_per_token": "NLL/token (nats)",
        "zipf_coefficient": "Zipf coefficient", "distance": "distance to human text",
        "distance_ci_low": "distance CI low", "distance_ci_high": "distance CI high",
        "term_seq_rep_4": "term: 4-gram repetition", "term_distinct_2": "term: distinct-2",
        "term_in_corpus_4gram_share": "term: in-corpus 4-grams", "term_nll_per_token": "term: NLL/token",
        "term_zipf_coefficient": "term: Zipf coefficient", "default_cell": "default cell",
        "min_p_decision": "min-p decision",
    },
    figures={
        "sampling_heatmaps": Figure(
            "Sampling: entropy and kept tokens over the grid", "2 Sampling",
            caption=("Two heatmaps over temperature (rows) x the top-p and min-p cells (columns), each cell printed "
                     "with its value: the entropy (nats) and the kept-token count (colour on a log10 scale) of the "
                     "truncated next-token distribution."),
            draw="inferlab.report.figures:sampling_heatmaps"),
        "sampling_repetition": Figure(
            "Sampling: repetition against in-corpus 4-grams per cell, by temperature", "2 Sampling",
            caption=("One point per sampling cell: its 4-gram repetition (x) against its in-corpus 4-gram share (y), "
                     "coloured by temperature (circles top-p, diamonds min-p); the held-out human text (star), greedy "
                     "(cross) and the seed page's greedy repetition (dash-dot line) as references; the chosen default "
                     "is labelled."),
            draw="inferlab.report.figures:sampling_repetition"),
    },
    exports=(Export("inference", "sampling", {"distribution": "sp_distribution", "repetition": "sp_repetition",
                                              "default": "sp_default", "distance": "sp_distance",
                                              "logits": "sp_logits"}),),
    milestone="M2",
    milestone_title="Sampling: full repetition table, a default chosen by a stated rule, min-p decision",
    required=("sp_distribution", "sp_repetition", "sp_default"),
    optional=("sp_distance",),
    reviewed=("sampling",),
    body=("cell", "entropy_nats", "kept", SEED_KEPT, "seq_rep_4", "in_corpus_4gram_share", "distance"),
    body_needs=("sp_repetition", "sp_default"),
)
