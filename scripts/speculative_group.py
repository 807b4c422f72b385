"""Experiment 3, one group (draft, k), on every configured engine: speculative sampling runs and
target-only sampling interleaved with them (the wall clock's baseline), greedy identity, forward times."""

from pathlib import Path

import _checkout  # noqa: F401  (this checkout's inferlab, also in conda jobs)
import pandas as pd

from inferlab.core.checkpoint import load_checkpoint
from inferlab.core.checkpoint_meta import model_stamp
from inferlab.core.engine import make_engine
from inferlab.core.packages import graph_dirs
from inferlab.core.timing import BURST_IN_WORDS
from inferlab.corpus.text import load_vocabulary
from inferlab.jobs.contention import contention_stamp, load_snapshot, rep_spread
from inferlab.jobs.job_start import start_job
from inferlab.jobs.lineage import job_lineage
from inferlab.jobs.machine import machine_stamp
from inferlab.jobs.stamps import job_stamps
from inferlab.jobs.tables import write_table
from inferlab.speculative.bench import run_forward_timing, run_greedy_identity, run_group
from inferlab.speculative.decode import SamplingSettings
from inferlab.speculative.forwards import encode_prompts, forward_timing_context

smk = snakemake  # noqa: F821
log = start_job(smk.log[0], smk.threads, lineage=job_lineage(smk.rule, smk.params.items(), smk.input))
p = smk.params
vocab = load_vocabulary(smk.input.vocab)
vocab_sha256 = vocab.sha256()
target_dir, draft_dir = Path(smk.input.target_meta).parent, Path(smk.input.draft_meta).parent
target, target_meta = load_checkpoint(target_dir, expected_vocab_sha256=vocab_sha256)
draft, draft_meta = load_checkpoint(draft_dir, expected_vocab_sha256=vocab_sha256)
prompts = encode_prompts(vocab, p.prompts)
settings = SamplingSettings(temperature=p.temperature, top_p=p.top_p)
context = forward_timing_context(prompts, p.new_tokens)

before = load_snapshot()
tables: dict[str, list[pd.DataFrame]] = {"runs": [], "target_only": [], "greedy": [], "forward": []}
engines = {}
for name in p.engines:
    engine = make_engine(name, graph_dirs=graph_dirs(smk.input))
    print(f"engine {name}: running {engine.engine_used} {engine.engine_fallback_reason or ''}", file=log, flush=True)
    runs, target_only = run_group(target, draft, prompts, p.seeds, p.new_tokens, p.k, settings, p.timing_reps,
                                  progress_file=log, engine=engine)
    tables["runs"].append(runs)
    tables["target_only"].append(target_only)
    tables["greedy"].append(run_greedy_identity(target, draft, prompts, p.new_tokens, p.k, engine=engine))
    tables["forward"].append(run_forward_timing(target, draft, context, p.k, p.forward_reps, engine=engine,
                                                    settings=settings))
    engines[name] = engine.stamp()
runs, target_only, greedy, forward = (pd.concat(tables[key], ignore_index=True) for key in tables)
contention = contention_stamp(before, load_snapshot(), float(
    forward.groupby(["engine", "role", "tokens_per_forward"])["forward_ms"].agg(rep_spread).max()))

provenance = job_stamps(
    machine_stamp("cpu"), model_stamp(target_meta, p.target),
    {"prompts": len(prompts), "seeds": list(p.seeds), "new_tokens": p.new_tokens, "timing_reps": p.timing_reps,
     "forward_reps": p.forward_reps,
     "forward_calls": BURST_IN_WORDS},
    "target-only sampling on the same engine, same prompts and seeds, interleaved with the speculative runs "
    "in this job (groups/<group>_target_only.parquet)",
    draft=model_stamp(draft_meta, p.draft), settings=vars(settings) | {"k": p.k}, engines=engines,
    contention=contention)
target_only.insert(0, "k", p.k)
for table, path in ((runs, smk.output.runs), (target_only, smk.output.target_only), (greedy, smk.output.greedy),
                    (forward, smk.output.forward)):
    table.insert(0, "draft", p.draft)
    table["contended"] = contention["contended"]
    write_table(table, path, provenance=provenance)
for engine, rows in runs[runs["rep"] == 0].groupby("engine"):
    same = greedy[greedy["engine"] == engine]
    print(f"[{engine}] {p.draft} k={p.k}: alpha {rows['accepted'].sum() / rows['proposed'].sum():.3f}, "
          f"{rows['generated'].sum() / rows['target_forwards'].sum():.3f} tokens per target forward, "
          f"greedy identical {int(same['identical'].sum())}/{len(same)}; ms per token "
          f"{runs.loc[runs['engine'] == engine, 'ms_per_token'].median():.3f} speculative, "
          f"{target_only.loc[target_only['engine'] == engine, 'ms_per_token'].median():.3f} target-only", file=log)
print(f"engines: {engines}\ncontention: {contention}", file=log)
