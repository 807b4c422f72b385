"""Single decode steps at several sequence lengths (for the a + b·positions fit) and a profiled cached step,
per engine."""

from pathlib import Path

import _checkout  # noqa: F401  (this checkout's inferlab, also in conda jobs)
import pandas as pd

from inferlab.core.checkpoint import load_checkpoint
from inferlab.core.checkpoint_meta import model_stamp
from inferlab.core.engine import make_engine
from inferlab.core.generate import generate
from inferlab.core.packages import graph_dirs
from inferlab.core.timing import BURST_IN_WORDS
from inferlab.corpus.prompt import encode_prompt
from inferlab.corpus.text import load_vocabulary
from inferlab.jobs.contention import contention_stamp, load_snapshot, rep_spread
from inferlab.jobs.job_start import start_job
from inferlab.jobs.lineage import job_lineage
from inferlab.jobs.machine import machine_stamp, resolve_device
from inferlab.jobs.stamps import job_stamps
from inferlab.jobs.tables import write_table
from inferlab.kvcache.bench import profile_cached_step, step_positions, time_steps

smk = snakemake  # noqa: F821
p = smk.params
log = start_job(smk.log[0], smk.threads, lineage=job_lineage(smk.rule, smk.params.items(), smk.input))
device = resolve_device(p.device)
model, meta = load_checkpoint(Path(smk.input.meta).parent, device)
prompt, unk = encode_prompt(load_vocabulary(smk.input.vocab), p.prompt, device)
sequence = generate(model, prompt, p.max_length).tokens  # the tokens a real generation runs over
positions = step_positions(prompt.size(1), p.max_length, p.points)
before = load_snapshot()
steps, profiles, engines = [], [], {}
for name in p.engines:
    engine = make_engine(name, graph_dirs=graph_dirs(smk.input))
    print(f"engine {name}: running {engine.engine_used} {engine.engine_fallback_reason or ''}", file=log, flush=True)
    # warm-up >= 1, so a compiled engine's compilation stays out of the timed reps
    steps.append(time_steps(model, sequence, positions, p.reps, max(1, p.warmup), device, progress_file=log,
                            engine=engine))
    # Profile a step in the middle of the longest generation.
    profiles.append(profile_cached_step(model, sequence, positions[len(positions) // 2], p.profile_steps, device,
                                        engine=engine))
    engines[name] = engine.stamp()
steps, profile = pd.concat(steps, ignore_index=True), pd.concat(profiles, ignore_index=True)
contention = contention_stamp(before, load_snapshot(),
                              float(steps.groupby(["engine", "mode", "positions"])["step_ms"].agg(rep_spread).max()))
steps["contended"] = profile["contended"] = contention["contended"]
provenance = job_stamps(machine_stamp(device), model_stamp(meta, p.model_name),
                        {"forward_reps": p.reps, "forward_calls": BURST_IN_WORDS},
                        "cached and uncached single steps over the same tokens",
                        warmup=p.warmup, prompt=p.prompt, prompt_unk=unk, engines=engines, contention=contention)
write_table(steps, smk.output.steps, provenance=provenance)
write_table(profile, smk.output.profile, provenance={**provenance, "repeats": p.profile_steps})
print(steps.groupby(["engine", "mode", "positions"])["step_ms"].median().to_string(), file=log)
print(profile.to_string(), file=log)
print(f"engines: {engines}\ncontention: {contention}", file=log)
