"""Experiment 3, one group (draft, k): speculative sampling runs, greedy identity, forward times."""

from pathlib import Path

import _checkout  # noqa: F401  (this checkout's inferlab, also in conda jobs)

from inferlab.checkpoint import load_checkpoint, model_stamp
from inferlab.corpus import load_vocabulary
from inferlab.jobs import start_job
from inferlab.lineage import job_lineage
from inferlab.provenance import machine_stamp
from inferlab.speculative import SamplingSettings
from inferlab.speculative_bench import encode_prompts, run_forward_timing, run_greedy_identity, run_group
from inferlab.stamps import job_stamps
from inferlab.tables import write_table

smk = snakemake  # noqa: F821
log = start_job(smk.log[0], smk.threads, lineage=job_lineage(smk.rule, smk.params.items(), smk.input))
p = smk.params
vocab = load_vocabulary(smk.input.vocab)
target, target_meta = load_checkpoint(Path(smk.input.target_meta).parent, expected_vocab_sha256=vocab.sha256())
draft, draft_meta = load_checkpoint(Path(smk.input.draft_meta).parent, expected_vocab_sha256=vocab.sha256())
prompts = encode_prompts(vocab, p.prompts)
settings = SamplingSettings(temperature=p.temperature, top_p=p.top_p)

runs = run_group(target, draft, prompts, p.seeds, p.new_tokens, p.k, settings, p.timing_reps, progress_file=log)
greedy = run_greedy_identity(target, draft, prompts, p.new_tokens, p.k)
context = max(len(x["ids"]) for x in prompts) + p.new_tokens // 2
forward = run_forward_timing(target, draft, context, p.k, p.forward_reps)

provenance = job_stamps(
    machine_stamp("cpu"), model_stamp(target_meta, p.target),
    {"prompts": len(prompts), "seeds": list(p.seeds), "new_tokens": p.new_tokens, "timing_reps": p.timing_reps,
     "forward_reps": p.forward_reps},
    "target-only sampling, same prompts and seeds (results/speculative/baseline.parquet)",
    draft=model_stamp(draft_meta, p.draft), settings=vars(settings) | {"k": p.k})
for table, path in ((runs, smk.output.runs), (greedy, smk.output.greedy), (forward, smk.output.forward)):
    table.insert(0, "draft", p.draft)
    write_table(table, path, provenance=provenance)
first = runs[runs["rep"] == 0]
print(f"{p.draft} k={p.k}: alpha {first['accepted'].sum() / first['proposed'].sum():.3f}, "
      f"{first['generated'].sum() / first['target_forwards'].sum():.3f} tokens per target forward, "
      f"greedy identical {int(greedy['identical'].sum())}/{len(greedy)}", file=log)
