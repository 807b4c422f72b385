"""The human reference row: validation-split continuations scored by the cells' own scorer."""

from pathlib import Path

import _checkout  # noqa: F401  (this checkout's inferlab, also in conda jobs)
import numpy as np

from inferlab.checkpoint import load_checkpoint, load_token_ids, model_stamp
from inferlab.corpus import load_vocabulary
from inferlab.human_reference import score_human
from inferlab.jobs import start_job
from inferlab.lineage import job_lineage
from inferlab.provenance import machine_stamp
from inferlab.repetition import corpus_ngram_index
from inferlab.stamps import job_stamps
from inferlab.tables import read_json, write_table

smk = snakemake  # noqa: F821
log = start_job(smk.log[0], smk.threads, lineage=job_lineage(smk.rule, smk.params.items(), smk.input))
p = smk.params
vocab = load_vocabulary(smk.input.vocab)
model, meta = load_checkpoint(Path(smk.input.meta).parent,
                              expected_vocab_sha256=read_json(smk.input.stats)["vocab_sha256"])
index = corpus_ngram_index(load_token_ids(smk.input.train).numpy(), base=len(vocab))
val_ids = np.asarray(load_token_ids(smk.input.val).numpy(), dtype=np.int64)
rows = score_human(model, vocab, val_ids, p.prompts, p.samples, p.new_tokens, p.seed, index)
write_table(rows, smk.output[0], provenance=job_stamps(
    machine_stamp("cpu"), model_stamp(meta, p.model), len(rows), "none",
    cell={"cell": "human", "truncation": "reference"}, source="validation split",
    sources=rows["source"].value_counts().to_dict(), window_seed=p.seed))
print(rows.groupby(["prompt", "source"]).size().to_string(), file=log)
print(rows.drop(columns=["text", "context"]).describe().to_string(), file=log)
