"""Which tables and metric experiments each milestone stands on: written once, read by the
milestone checks, the staleness check, the metrics table's stamps and the diff's cards.

Table keys are those of REPORT_TABLES (workflow/rules/report.smk); experiments are the `experiment` column of
results/metrics.parquet. Torch-free and import-free, so every layer can read it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MilestoneInputs:
    required: tuple[str, ...]  # without these the milestone is "missing"
    optional: tuple[str, ...]  # read when present (a check degrades without them)
    experiments: tuple[str, ...]  # the metrics rows the milestone's card summarises

    @property
    def tables(self) -> tuple[str, ...]:
        return self.required + self.optional


MILESTONE_INPUTS = {
    "M1": MilestoneInputs(("kv_timings", "kv_summary", "kv_fit", "kv_profile"), ("roofline",),
                          ("kvcache", "roofline")),
    "M2": MilestoneInputs(("sp_distribution", "sp_repetition", "sp_default"), (), ("sampling",)),
    "M3": MilestoneInputs(("spec_summary", "spec_identity"), ("spec_best",), ("speculative",)),
    "M4": MilestoneInputs(("quant_summary", "noise_floor"), ("quant_choice",), ("quant", "models")),
}
