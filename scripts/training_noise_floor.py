"""Collect the reruns' validation losses into results/noise_floor.parquet."""

import logging
from pathlib import Path

import _checkout  # noqa: F401  (this checkout's inferlab, also in conda jobs)

from inferlab.core.checkpoint_meta import read_meta
from inferlab.jobs.job_start import start_job
from inferlab.jobs.lineage import job_lineage
from inferlab.jobs.stamps import job_stamps
from inferlab.jobs.tables import write_table
from inferlab.training.noise_floor import noise_floor_table

smk = snakemake  # noqa: F821
start_job(smk.log[0], 1, lineage=job_lineage(smk.rule, smk.params.items(), smk.input))
metas = [read_meta(Path(path).parent) for path in [smk.input.base, *smk.input.reruns]]
runs = [{"name": m["name"], "seed": m["train_config"]["seed"], "val_loss": m["val_loss"]} for m in metas]
table = noise_floor_table(runs, smk.params.sigmas, smk.params.use, smk.params.fixed_value)
if not table["floor_reliable"].iloc[0]:
    logging.warning(table["floor_reliability_note"].iloc[0])
# The losses were measured by the training jobs: the base run's machine is the stamp.
write_table(table, smk.output[0], provenance=job_stamps(metas[0].get("machine"), None, len(runs),
                                                        "the base training run's validation loss"))
