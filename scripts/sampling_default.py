"""The default sampling setting, chosen by the rule in config (default_rule.kind), the min-p
decision, and every cell's distance to the human reference."""

import pandas as pd

from inferlab.human_match import cell_distances, choose_human_match
from inferlab.jobs import start_job
from inferlab.provenance import machine_stamp
from inferlab.repetition import choose_default, wide_summary
from inferlab.tables import read_provenance, read_table, write_table

smk = snakemake  # noqa: F821
log = start_job(smk.log[0], 1)
rule = smk.params.rule
summary, distribution = read_table(smk.input.summary), read_table(smk.input.distribution)
distances = cell_distances(read_table(smk.input.samples), smk.params.resamples, smk.params.seed)
if rule["kind"] == "human_match":
    record = choose_human_match(distances, wide_summary(summary), distribution)
else:
    record = choose_default(summary, distribution, rule["max_in_corpus_drop"])
provenance = {**read_provenance(smk.input.summary), "machine": machine_stamp("cpu"), "default_rule": rule}
write_table(pd.DataFrame([record]), smk.output.default, provenance=provenance)
write_table(distances.assign(chosen=distances["cell"] == record["cell"]), smk.output.distances,
            provenance=provenance)
print(distances.to_string(index=False), file=log)
for key, value in record.items():
    print(f"{key}: {value}", file=log)
