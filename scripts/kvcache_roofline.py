"""Roofline bounds for the anchor (from config/anchor-model.json) and for our model on this machine."""

import _checkout  # noqa: F401  (this checkout's inferlab, also in conda jobs)
import pandas as pd

from inferlab.core.checkpoint_meta import model_stamp
from inferlab.core.config import GPTConfig, dtype_bytes
from inferlab.jobs.job_start import start_job
from inferlab.jobs.lineage import job_lineage
from inferlab.jobs.machine import format_machine
from inferlab.jobs.stamps import job_stamps
from inferlab.jobs.tables import read_json, read_provenance, read_table, write_table
from inferlab.kvcache.anchor import load_anchor
from inferlab.kvcache.roofline import anchor_roofline, best_rates, our_roofline

smk = snakemake  # noqa: F821
log = start_job(smk.log[0], smk.threads, lineage=job_lineage(smk.rule, smk.params.items(), smk.input))
meta = read_json(smk.input.meta)
probes = read_table(smk.input.probe)
machine = read_provenance(smk.input.probe)["machine"]
summary = read_table(smk.input.summary)
bandwidth, flops = best_rates(probes)
measured = []
# one measured row per engine, eager first (readers that take the first "ours" row get the baseline)
for engine, rows in sorted(summary.groupby("engine", sort=False), key=lambda item: item[0] != "eager"):
    longest = rows[(rows["mode"] == "cache") & (rows["length"] == rows["length"].max())].iloc[0]
    ours = our_roofline(GPTConfig.from_dict(meta["model_config"]), meta["params"], dtype_bytes(),
                        int(longest["prompt_tokens"]), int(longest["length"]), bandwidth, flops,
                        float(longest["ms_per_token_median"]),
                        smk.params.model_name, format_machine(machine), machine["device"])
    measured.append(ours.assign(measured_at_length=int(longest["length"]), engine=engine,
                                engine_used=longest["engine_used"]))
table = pd.concat([anchor_roofline(load_anchor(smk.input.anchor), smk.params.anchor_context_tokens), *measured],
                  ignore_index=True)
write_table(table, smk.output[0], provenance=job_stamps(
    machine, model_stamp(meta, smk.params.model_name), read_provenance(smk.input.summary)["repeats"],
    "roofline lower bound max(bytes/bandwidth, FLOPs/peak)",
    probe_repeats=read_provenance(smk.input.probe)["repeats"]))
print(table.T.to_string(), file=log)
