"""Experiment 3 summary: per-group α, yield vs formula, theoretical and wall-clock speedups."""

import _checkout  # noqa: F401  (this checkout's inferlab, also in conda jobs)
import pandas as pd

from inferlab.checkpoint import model_stamp
from inferlab.jobs import start_job
from inferlab.lineage import job_lineage
from inferlab.speculative_bench import best_groups, summarise
from inferlab.stamps import carried_stamps
from inferlab.tables import read_json, read_provenance, read_table, write_table

smk = snakemake  # noqa: F821
log = start_job(smk.log[0], smk.threads, lineage=job_lineage(smk.rule, smk.params.items(), smk.input))
p = smk.params
runs = pd.concat([read_table(path) for path in smk.input.runs], ignore_index=True)
forward = pd.concat([read_table(path) for path in smk.input.forward], ignore_index=True)
greedy = pd.concat([read_table(path) for path in smk.input.greedy], ignore_index=True)
baseline = read_table(smk.input.baseline)
metas = {p.target: read_json(smk.input.target_meta)} | {
    name: read_json(path) for name, path in zip(p.drafts, smk.input.draft_metas, strict=True)}

summary = summarise(runs, forward, baseline, {name: meta["params"] for name, meta in metas.items()}, p.target)
best = best_groups(summary)
group_prov = read_provenance(smk.input.runs[0])
measured = {key: group_prov[key] for key in ("machine", "model", "repeats", "baseline")}
provenance = carried_stamps(measured, model=model_stamp(metas[p.target], p.target),
                            drafts={name: model_stamp(metas[name], name) for name in p.drafts},
                            settings={k: v for k, v in group_prov.get("settings", {}).items() if k != "k"})
write_table(summary, smk.output.summary, provenance=provenance)
write_table(best, smk.output.best, provenance=provenance)
write_table(greedy[["draft", "k", "prompt_index", "prompt", "identical", "n_tokens", "first_mismatch"]],
            smk.output.greedy, provenance=provenance)
write_table(runs, smk.output.runs, provenance=provenance)
print(summary[["draft", "k", "alpha", "overlap_mean", "tokens_per_target_forward", "formula_rel_error",
               "speedup_theory_params", "speedup_theory_time", "wall_speedup"]].to_string(), file=log)
print(f"chosen: {best.iloc[0]['reason']}", file=log)
print(f"greedy identical {int(greedy['identical'].sum())}/{len(greedy)}", file=log)
