"""Next-token distribution for the sampling prompt: export the logits, then entropy and kept
count per grid cell, computed in float64 from exactly the exported numbers."""

from pathlib import Path

import _checkout  # noqa: F401  (this checkout's inferlab, also in conda jobs)
import pandas as pd

from inferlab.core.checkpoint import load_checkpoint
from inferlab.core.checkpoint_meta import model_stamp
from inferlab.core.generate import prefill
from inferlab.core.sampler import distribution_rows, logits_export
from inferlab.corpus.prompt import encode_prompt
from inferlab.corpus.text import load_vocabulary
from inferlab.jobs.job_start import start_job
from inferlab.jobs.lineage import job_lineage
from inferlab.jobs.machine import machine_stamp
from inferlab.jobs.stamps import job_stamps
from inferlab.jobs.tables import read_json, write_json, write_table

smk = snakemake  # noqa: F821
log = start_job(smk.log[0], smk.threads, lineage=job_lineage(smk.rule, smk.params.items(), smk.input))
vocab = load_vocabulary(smk.input.vocab)
model, meta = load_checkpoint(Path(smk.input.meta).parent,
                              expected_vocab_sha256=read_json(smk.input.stats)["vocab_sha256"])
prompt_ids, unk = encode_prompt(vocab, smk.params.prompt)
logits = prefill(model, prompt_ids)[0]  # (V,) float32
write_json(logits_export(smk.params.prompt, smk.params.model, meta["weights_sha256"], vocab.tokens,
                         logits, unk), smk.output.logits)
exported = read_json(smk.output.logits)["logits"]  # the very numbers the workbench will read
table = pd.DataFrame(distribution_rows(exported, smk.params.cells))
write_table(table, smk.output.table, provenance=job_stamps(
    machine_stamp("cpu"), model_stamp(meta, smk.params.model), 1, "none", prompt=smk.params.prompt,
    prompt_unk_chars=unk))
print(table.to_string(index=False), file=log)
