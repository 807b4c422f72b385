"""Time greedy generation of one length with and without the KV cache (alternating reps), per engine."""

from pathlib import Path

import _checkout  # noqa: F401  (this checkout's inferlab, also in conda jobs)
import pandas as pd

from inferlab.core.checkpoint import load_checkpoint
from inferlab.core.checkpoint_meta import model_stamp
from inferlab.core.engine import make_engine
from inferlab.core.packages import graph_dirs
from inferlab.corpus.prompt import encode_prompt
from inferlab.corpus.text import load_vocabulary
from inferlab.jobs.contention import contention_stamp, load_snapshot, rep_spread
from inferlab.jobs.job_start import start_job
from inferlab.jobs.lineage import job_lineage
from inferlab.jobs.machine import machine_stamp, resolve_device
from inferlab.jobs.stamps import job_stamps
from inferlab.jobs.tables import write_table
from inferlab.kvcache.bench import time_generation

smk = snakemake  # noqa: F821
log = start_job(smk.log[0], smk.threads, lineage=job_lineage(smk.rule, smk.params.items(), smk.input))
device = resolve_device(smk.params.device)
model, meta = load_checkpoint(Path(smk.input.meta).parent, device)
prompt, unk = encode_prompt(load_vocabulary(smk.input.vocab), smk.params.prompt, device)
before = load_snapshot()
tables, engines = [], {}
for name in smk.params.engines:
    engine = make_engine(name, graph_dirs=graph_dirs(smk.input))
    print(f"engine {name}: running {engine.engine_used} {engine.engine_fallback_reason or ''}", file=log, flush=True)
    tables.append(time_generation(model, prompt, smk.params.length, smk.params.reps, max(1, smk.params.warmup),
                                  device, progress_file=log, engine=engine))
    engines[name] = engine.stamp()
table = pd.concat(tables, ignore_index=True)
contention = contention_stamp(before, load_snapshot(),
                              float(table.groupby(["engine", "mode"])["total_ms"].agg(rep_spread).max()))
table["contended"] = contention["contended"]
provenance = job_stamps(machine_stamp(device), model_stamp(meta, smk.params.model_name), smk.params.reps,
                        "no_cache (full recompute) on the same engine", warmup=smk.params.warmup,
                        prompt=smk.params.prompt, prompt_unk=unk, engines=engines, contention=contention)
write_table(table, smk.output[0], provenance=provenance)
print(table.groupby(["engine", "mode"])[["total_ms", "ms_per_token"]].median().to_string(), file=log)
print(f"engines: {engines}\ncontention: {contention}", file=log)
