"""Experiment 3 baseline: plain target-only sampling of the same prompts and seeds, timed on every engine."""

from pathlib import Path

import _checkout  # noqa: F401  (this checkout's inferlab, also in conda jobs)
import pandas as pd

from inferlab.core.checkpoint import load_checkpoint
from inferlab.core.checkpoint_meta import model_stamp
from inferlab.core.engine import make_engine
from inferlab.corpus.text import load_vocabulary
from inferlab.jobs.contention import contention_stamp, load_snapshot, rep_spread
from inferlab.jobs.lineage import job_lineage
from inferlab.jobs.machine import machine_stamp
from inferlab.jobs.setup import start_job
from inferlab.jobs.stamps import job_stamps
from inferlab.jobs.tables import write_table
from inferlab.speculative.bench import encode_prompts, run_baseline
from inferlab.speculative.decode import SamplingSettings

smk = snakemake  # noqa: F821
log = start_job(smk.log[0], smk.threads, lineage=job_lineage(smk.rule, smk.params.items(), smk.input))
p = smk.params
vocab = load_vocabulary(smk.input.vocab)
target, target_meta = load_checkpoint(Path(smk.input.meta).parent, expected_vocab_sha256=vocab.sha256())
settings = SamplingSettings(temperature=p.temperature, top_p=p.top_p)
before = load_snapshot()
tables, engines = [], {}
for name in p.engines:
    engine = make_engine(name)
    print(f"engine {name}: running {engine.engine_used} {engine.engine_fallback_reason or ''}", file=log, flush=True)
    tables.append(run_baseline(target, encode_prompts(vocab, p.prompts), p.seeds, p.new_tokens, settings,
                               p.timing_reps, progress_file=log, engine=engine))
    engines[name] = engine.stamp()
table = pd.concat(tables, ignore_index=True)
contention = contention_stamp(before, load_snapshot(), float(table.groupby("engine")["wall_ms"].agg(rep_spread).max()))
table["contended"] = contention["contended"]
write_table(table, smk.output[0], provenance=job_stamps(
    machine_stamp("cpu"), model_stamp(target_meta, p.target),
    {"prompts": len(p.prompts), "seeds": list(p.seeds), "new_tokens": p.new_tokens, "timing_reps": p.timing_reps},
    "this table is the baseline: one target forward per new token, per engine", settings=vars(settings),
    engines=engines, contention=contention))
print(table.groupby("engine")["ms_per_token"].median().to_string(), file=log)
