"""Concatenate the cells and the human reference: bootstrap summary per cell and metric, every
sample's metrics (for the default rule's distance CI), and a few example texts."""

import _checkout  # noqa: F401  (this checkout's inferlab, also in conda jobs)
import pandas as pd

from inferlab.jobs.job_start import start_job
from inferlab.jobs.lineage import job_lineage
from inferlab.jobs.stamps import carried_stamps
from inferlab.jobs.tables import read_provenance, read_table, write_table
from inferlab.sampling.aggregate import example_texts, summarise

smk = snakemake  # noqa: F821
log = start_job(smk.log[0], 1, lineage=job_lineage(smk.rule, smk.params.items(), smk.input))
models = {read_provenance(path)["model"]["checkpoint_sha256"] for path in smk.input}
if len(models) != 1:
    raise ValueError(f"the cell tables come from {len(models)} different checkpoints; rerun the stale cells")
samples = pd.concat([read_table(path) for path in smk.input], ignore_index=True)
summary = summarise(samples, smk.params.resamples, smk.params.seed)
# The cells measured; this job only aggregates, so their stamp (machine included) is carried forward.
cell_stamps = {key: value for key, value in read_provenance(smk.input[0]).items() if key != "cell"}
provenance = carried_stamps(cell_stamps, repeats=int(samples.groupby("cell").size().min()),
                            bootstrap_resamples=smk.params.resamples, bootstrap_seed=smk.params.seed)
write_table(summary, smk.output.summary, provenance=provenance)
write_table(example_texts(samples, smk.params.example_texts), smk.output.examples, provenance=provenance)
write_table(samples, smk.output.samples, provenance=provenance)
print(summary.pivot(index="cell", columns="metric", values="mean").to_string(), file=log)
