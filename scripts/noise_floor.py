"""Collect the reruns' validation losses into results/noise_floor.parquet."""

from inferlab.jobs import start_job
from inferlab.lineage import job_lineage
from inferlab.noise import noise_floor_table
from inferlab.provenance import machine_stamp
from inferlab.tables import read_json, write_table

smk = snakemake  # noqa: F821
start_job(smk.log[0], 1, lineage=job_lineage(smk.rule, smk.params.items(), smk.input))
metas = [read_json(path) for path in [smk.input.base, *smk.input.reruns]]
runs = [{"name": m["name"], "seed": m["train_config"]["seed"], "val_loss": m["val_loss"]} for m in metas]
table = noise_floor_table(runs, smk.params.sigmas, smk.params.use, smk.params.fixed_value)
write_table(table, smk.output[0], provenance=machine_stamp("cpu"))
