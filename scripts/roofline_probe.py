"""Measure this machine's memory bandwidth and fp32 matmul FLOP/s (medians of short probes)."""

from inferlab.jobs import start_job
from inferlab.lineage import job_lineage
from inferlab.provenance import machine_stamp, resolve_device
from inferlab.roofline import run_probes
from inferlab.tables import read_json, write_table

smk = snakemake  # noqa: F821
p = smk.params
log = start_job(smk.log[0], smk.threads, lineage=job_lineage(smk.rule, smk.params.items(), smk.input))
device = resolve_device(p.device)
weight_bytes = read_json(smk.input.meta)["params"] * 4  # fp32 weights: the size a decode step streams
table = run_probes(device, [weight_bytes, int(p.probe_mb * 2**20)], p.matmul_size, p.repeats)
write_table(table, smk.output[0], provenance={"machine": machine_stamp(device), "reps": p.repeats})
print(table.to_string(), file=log)
