"""Time greedy generation of one length with and without the KV cache (alternating reps)."""

from pathlib import Path

import _checkout  # noqa: F401  (this checkout's inferlab, also in conda jobs)

from inferlab.checkpoint import load_checkpoint, model_stamp
from inferlab.corpus import encode_prompt, load_vocabulary
from inferlab.jobs import start_job
from inferlab.kvbench import time_generation
from inferlab.lineage import job_lineage
from inferlab.provenance import machine_stamp, resolve_device
from inferlab.stamps import job_stamps
from inferlab.tables import write_table

smk = snakemake  # noqa: F821
log = start_job(smk.log[0], smk.threads, lineage=job_lineage(smk.rule, smk.params.items(), smk.input))
device = resolve_device(smk.params.device)
model, meta = load_checkpoint(Path(smk.input.meta).parent, device)
prompt, unk = encode_prompt(load_vocabulary(smk.input.vocab), smk.params.prompt, device)
table = time_generation(model, prompt, smk.params.length, smk.params.reps, smk.params.warmup, device,
                        progress_file=log)
provenance = job_stamps(machine_stamp(device), model_stamp(meta, smk.params.model_name), smk.params.reps,
                        "no_cache (full recompute)", warmup=smk.params.warmup, prompt=smk.params.prompt,
                        prompt_unk=unk)
write_table(table, smk.output[0], provenance=provenance)
print(table.groupby("mode")[["total_ms", "ms_per_token"]].median().to_string(), file=log)
