"""The default sampling setting, chosen by the rule in config (default_rule.kind), the min-p
decision, and every cell's distance to the human reference."""

import _checkout  # noqa: F401  (this checkout's inferlab, also in conda jobs)
import pandas as pd

from inferlab.jobs.job_start import start_job
from inferlab.jobs.lineage import job_lineage
from inferlab.jobs.stamps import carried_stamps
from inferlab.jobs.tables import read_provenance, read_table, write_table
from inferlab.sampling.human_match import cell_distances, choose_human_match
from inferlab.sampling.summary_table import wide_summary
from inferlab.sampling.threshold_rule import choose_default

smk = snakemake  # noqa: F821
log = start_job(smk.log[0], 1, lineage=job_lineage(smk.rule, smk.params.items(), smk.input))
rule = smk.params.rule
summary, distribution = read_table(smk.input.summary), read_table(smk.input.distribution)
distances = cell_distances(read_table(smk.input.samples), smk.params.resamples, smk.params.seed)
if rule["kind"] == "human_match":
    record = choose_human_match(distances, wide_summary(summary), distribution)
else:
    record = choose_default(summary, distribution, rule["max_in_corpus_drop"])
provenance = {**carried_stamps(read_provenance(smk.input.summary)), "default_rule": rule}
write_table(pd.DataFrame([record]), smk.output.default, provenance=provenance)
write_table(distances.assign(chosen=distances["cell"] == record["cell"]), smk.output.distances,
            provenance=provenance)
print(distances.to_string(index=False), file=log)
for key, value in record.items():
    print(f"{key}: {value}", file=log)
