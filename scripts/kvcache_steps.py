"""Single decode steps at several sequence lengths (for the a + b·positions fit) and a profiled cached step."""

from pathlib import Path

import _checkout  # noqa: F401  (this checkout's inferlab, also in conda jobs)

from inferlab.checkpoint import load_checkpoint, model_stamp
from inferlab.corpus import encode_prompt, load_vocabulary
from inferlab.generate import generate
from inferlab.jobs import start_job
from inferlab.kvbench import profile_cached_step, step_positions, time_steps
from inferlab.lineage import job_lineage
from inferlab.provenance import machine_stamp, resolve_device
from inferlab.stamps import job_stamps
from inferlab.tables import write_table

smk = snakemake  # noqa: F821
p = smk.params
log = start_job(smk.log[0], smk.threads, lineage=job_lineage(smk.rule, smk.params.items(), smk.input))
device = resolve_device(p.device)
model, meta = load_checkpoint(Path(smk.input.meta).parent, device)
prompt, unk = encode_prompt(load_vocabulary(smk.input.vocab), p.prompt, device)
sequence = generate(model, prompt, p.max_length).tokens  # the tokens a real generation runs over
positions = step_positions(prompt.size(1), p.max_length, p.points)
steps = time_steps(model, sequence, positions, p.reps, p.warmup, device, progress_file=log)
# Profile a step in the middle of the longest generation.
profile = profile_cached_step(model, sequence, positions[len(positions) // 2], p.profile_steps, device)
provenance = job_stamps(machine_stamp(device), model_stamp(meta, p.model_name), p.reps,
                        "cached and uncached single steps over the same tokens",
                        warmup=p.warmup, prompt=p.prompt, prompt_unk=unk)
write_table(steps, smk.output.steps, provenance=provenance)
write_table(profile, smk.output.profile, provenance={**provenance, "repeats": p.profile_steps})
print(steps.groupby(["mode", "positions"])["step_ms"].median().to_string(), file=log)
print(profile.to_string(), file=log)
