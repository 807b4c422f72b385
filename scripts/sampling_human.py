"""The human reference row: validation-split continuations scored by the cells' own scorer."""

import _checkout  # noqa: F401  (this checkout's inferlab, also in conda jobs)
import numpy as np

from inferlab.core.checkpoint import load_token_ids
from inferlab.core.checkpoint_meta import model_stamp
from inferlab.jobs.job_start import start_job
from inferlab.jobs.lineage import job_lineage
from inferlab.jobs.machine import machine_stamp
from inferlab.jobs.stamps import job_stamps
from inferlab.jobs.tables import read_json, write_table
from inferlab.sampling.human_reference import score_human
from inferlab.sampling.repetition import load_scorer

smk = snakemake  # noqa: F821
log = start_job(smk.log[0], smk.threads, lineage=job_lineage(smk.rule, smk.params.items(), smk.input))
p = smk.params
model, meta, vocab, index = load_scorer(smk.input.meta, smk.input.vocab, read_json(smk.input.stats)["vocab_sha256"],
                                        smk.input.train)
val_ids = np.asarray(load_token_ids(smk.input.val).numpy(), dtype=np.int64)
rows = score_human(model, vocab, val_ids, p.prompts, p.samples, p.new_tokens, p.seed, index)
write_table(rows, smk.output[0], provenance=job_stamps(
    machine_stamp("cpu"), model_stamp(meta, p.model), len(rows), "none",
    cell={"cell": "human", "truncation": "reference"}, source="validation split",
    sources=rows["source"].value_counts().to_dict(), window_seed=p.seed))
print(rows.groupby(["prompt", "source"]).size().to_string(), file=log)
print(rows.drop(columns=["text", "context"]).describe().to_string(), file=log)
