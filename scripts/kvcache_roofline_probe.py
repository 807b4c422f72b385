"""Measure this machine's memory bandwidth and fp32 matmul FLOP/s (medians of short probes)."""

import _checkout  # noqa: F401  (this checkout's inferlab, also in conda jobs)

from inferlab.core.config import dtype_bytes
from inferlab.jobs.job_start import start_job
from inferlab.jobs.lineage import job_lineage
from inferlab.jobs.machine import machine_stamp, resolve_device
from inferlab.jobs.stamps import job_stamps
from inferlab.jobs.tables import read_json, write_table
from inferlab.kvcache.probes import run_probes

smk = snakemake  # noqa: F821
p = smk.params
log = start_job(smk.log[0], smk.threads, lineage=job_lineage(smk.rule, smk.params.items(), smk.input))
device = resolve_device(p.device)
weight_bytes = read_json(smk.input.meta)["params"] * dtype_bytes()  # the size a decode step streams
table = run_probes(device, [weight_bytes, int(p.probe_mb * 2**20)], p.matmul_size, p.repeats)
write_table(table, smk.output[0],
            provenance=job_stamps(machine_stamp(device), None, p.repeats, "none (a probe of the machine)"))
print(table.to_string(), file=log)
