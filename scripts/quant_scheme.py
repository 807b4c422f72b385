"""One quantization scheme: quality against fp32 on the full validation split, plus speed if a kernel exists."""

from pathlib import Path

import _checkout  # noqa: F401  (this checkout's inferlab, also in conda jobs)
import pandas as pd

from inferlab.core.checkpoint import load_checkpoint, load_token_ids
from inferlab.core.checkpoint_meta import model_stamp
from inferlab.core.packages import graph_dirs
from inferlab.corpus.prompt import encode_prompt
from inferlab.corpus.text import load_vocabulary
from inferlab.jobs.job_start import start_job
from inferlab.jobs.lineage import job_lineage
from inferlab.jobs.machine import machine_stamp
from inferlab.jobs.stamps import job_stamps
from inferlab.jobs.tables import write_table
from inferlab.quant.bench import BASELINE, run_scheme
from inferlab.quant.methods import EMBEDDING_NOTE, SCALE_BITS

smk = snakemake  # noqa: F821
log = start_job(smk.log[0], smk.threads, lineage=job_lineage(smk.rule, smk.params.items(), smk.input))
model, meta = load_checkpoint(Path(smk.input.meta).parent, "cpu")
vocab = load_vocabulary(smk.input.vocab)
speed = smk.params.speed
prompt, prompt_unk = encode_prompt(vocab, speed["prompt"])
row = run_scheme(model, smk.params.scheme, load_token_ids(smk.input.val), load_token_ids(smk.input.train),
                 smk.params.seq_len, prompt, speed["new_tokens"], speed["reps"],
                 gptq=smk.params.gptq, device="cpu", progress_file=log, engines=tuple(smk.params.engines),
                 graph_dirs=tuple(graph_dirs(smk.input)))
provenance = job_stamps(machine_stamp("cpu"), model_stamp(meta, smk.params.model_name),
                        {"quality": "one deterministic pass over the full validation split",
                         "speed_reps": row["speed_reps"]}, BASELINE, **{
              "embedding": EMBEDDING_NOTE, "storage": f"{SCALE_BITS}-bit float scales, zero points at b bits",
              "gptq": smk.params.gptq, "speed_prompt": speed["prompt"],
              "speed_prompt_unk": prompt_unk})
write_table(pd.DataFrame([row]), smk.output[0], provenance=provenance)
print(pd.Series(row).to_string(), file=log)
