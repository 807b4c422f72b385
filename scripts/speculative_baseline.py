"""Experiment 3 baseline: plain target-only sampling of the same prompts and seeds, timed."""

from pathlib import Path

import _checkout  # noqa: F401  (this checkout's inferlab, also in conda jobs)

from inferlab.checkpoint import load_checkpoint, model_stamp
from inferlab.corpus import load_vocabulary
from inferlab.jobs import start_job
from inferlab.lineage import job_lineage
from inferlab.provenance import machine_stamp
from inferlab.speculative import SamplingSettings
from inferlab.speculative_bench import encode_prompts, run_baseline
from inferlab.stamps import job_stamps
from inferlab.tables import write_table

smk = snakemake  # noqa: F821
log = start_job(smk.log[0], smk.threads, lineage=job_lineage(smk.rule, smk.params.items(), smk.input))
p = smk.params
vocab = load_vocabulary(smk.input.vocab)
target, target_meta = load_checkpoint(Path(smk.input.meta).parent, expected_vocab_sha256=vocab.sha256())
settings = SamplingSettings(temperature=p.temperature, top_p=p.top_p)
table = run_baseline(target, encode_prompts(vocab, p.prompts), p.seeds, p.new_tokens, settings,
                     p.timing_reps, progress_file=log)
write_table(table, smk.output[0], provenance=job_stamps(
    machine_stamp("cpu"), model_stamp(target_meta, p.target),
    {"prompts": len(p.prompts), "seeds": list(p.seeds), "new_tokens": p.new_tokens, "timing_reps": p.timing_reps},
    "this table is the baseline: one target forward per new token", settings=vars(settings)))
print(f"target-only: median {table['ms_per_token'].median():.3f} ms per token", file=log)
