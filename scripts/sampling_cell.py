"""One repetition cell: prompts x samples x new tokens, scored per sample."""

import _checkout  # noqa: F401  (this checkout's inferlab, also in conda jobs)
from tqdm import tqdm

from inferlab.core.checkpoint_meta import model_stamp
from inferlab.jobs.job_start import start_job
from inferlab.jobs.lineage import job_lineage
from inferlab.jobs.machine import machine_stamp
from inferlab.jobs.stamps import job_stamps
from inferlab.jobs.tables import read_json, write_table
from inferlab.sampling.repetition import generate_cell, load_scorer

smk = snakemake  # noqa: F821
log = start_job(smk.log[0], smk.threads, lineage=job_lineage(smk.rule, smk.params.items(), smk.input))
p = smk.params
model, meta, vocab, index = load_scorer(smk.input.meta, smk.input.vocab, read_json(smk.input.stats)["vocab_sha256"],
                                        smk.input.train)
with tqdm(total=len(p.prompts) * p.new_tokens, desc=p.cell["cell"], file=log, mininterval=2) as bar:
    rows = generate_cell(model, vocab, p.cell, p.prompts, p.samples, p.new_tokens, p.seed, index,
                         on_step=bar.update)
write_table(rows, smk.output[0], provenance=job_stamps(
    machine_stamp("cpu"), model_stamp(meta, p.model), len(rows), "greedy", cell=p.cell,
    prompt_unk_chars=int(rows["prompt_unk_chars"].sum())))
print(rows.drop(columns="text").describe().to_string(), file=log)
