"""Experiment 3 summary: per-group α, yield vs formula, theoretical and wall-clock speedups."""

import _checkout  # noqa: F401  (this checkout's inferlab, also in conda jobs)
import pandas as pd

from inferlab.core.checkpoint_meta import model_stamp
from inferlab.core.config import GPTConfig
from inferlab.core.engine_rows import by_engine
from inferlab.jobs.job_start import start_job
from inferlab.jobs.lineage import job_lineage
from inferlab.jobs.row_contention import contended_rows
from inferlab.jobs.stamps import carried_stamps
from inferlab.jobs.tables import read_json, read_provenance, read_table, write_table
from inferlab.kvcache.roofline import best_rates, step_bound_ms
from inferlab.speculative.summary import best_groups_by_engine, summarise, with_compile_seconds, with_step_bounds

smk = snakemake  # noqa: F821
log = start_job(smk.log[0], smk.threads, lineage=job_lineage(smk.rule, smk.params.items(), smk.input))
p = smk.params
# each group job's runs and stamp, read once
group_runs = {path: read_table(path) for path in smk.input.runs}
group_provs = {path: read_provenance(path) for path in smk.input.runs}
runs = pd.concat(group_runs.values(), ignore_index=True)
forward = pd.concat([read_table(path) for path in smk.input.forward], ignore_index=True)
greedy = pd.concat([read_table(path) for path in smk.input.greedy], ignore_index=True)
baseline = pd.concat([read_table(path) for path in smk.input.target_only], ignore_index=True)
metas = {p.target: read_json(smk.input.target_meta)} | {
    name: read_json(path) for name, path in zip(p.drafts, smk.input.draft_metas, strict=True)}

# c, the theoretical speedups and the wall-clock speedup against target-only sampling, within each engine
summary = by_engine(summarise, runs.drop(columns="contended", errors="ignore"),
                    forward.drop(columns="contended", errors="ignore"),
                    baseline.drop(columns="contended", errors="ignore"),
                    params={name: meta["params"] for name, meta in metas.items()}, target_name=p.target)
# how far each step is from its bound, at the position the forward timings ran at, on this run's probe
bandwidth, flops = best_rates(read_table(smk.input.probe))
(position,) = forward["context"].unique()
configs = {name: GPTConfig(**meta["model_config"]) for name, meta in metas.items()}
bounds = {name: step_bound_ms(configs[name], meta["params"], int(position), 1, bandwidth, flops)
          for name, meta in metas.items()}
verify_bounds = {int(k): step_bound_ms(configs[p.target], metas[p.target]["params"], int(position), int(k) + 1,
                                       bandwidth, flops) for k in summary["k"].unique()}
summary = with_step_bounds(summary, bounds, p.target, verify_bounds)
# each group job's compile time per engine, and its graphs compiled or loaded, as its stamp recorded them
engine_stamps = {(table["draft"].iloc[0], int(table["k"].iloc[0]), engine_name): stamp
                 for path, table in group_runs.items()
                 for engine_name, stamp in group_provs[path].get("engines", {}).items()}
summary = with_compile_seconds(summary, engine_stamps)
# each group job flags its own rows: one contended job leaves the other groups' rows uncontended
summary["contended"] = contended_rows(summary, runs, ["draft", "k"])
contended = bool(summary["contended"].any())
best = best_groups_by_engine(summary)
group_prov = group_provs[smk.input.runs[0]]
measured = {key: group_prov[key] for key in ("machine", "model", "repeats", "baseline")}
provenance = carried_stamps(measured, model=model_stamp(metas[p.target], p.target),
                            drafts={name: model_stamp(metas[name], name) for name in p.drafts},
                            settings={k: v for k, v in group_prov.get("settings", {}).items() if k != "k"},
                            engines=group_prov.get("engines", {}), contended=contended,
                            machines_per_group={path: prov["machine"] for path, prov in group_provs.items()})
write_table(summary, smk.output.summary, provenance=provenance)
write_table(best, smk.output.best, provenance=provenance)
write_table(greedy[["draft", "k", *(c for c in ("engine", "engine_used") if c in greedy.columns),
                    "prompt_index", "prompt", "identical", "n_tokens", "first_mismatch"]],
            smk.output.greedy, provenance=provenance)
write_table(runs, smk.output.runs, provenance=provenance)
columns = [*(c for c in ("engine",) if c in summary.columns), "draft", "k", "alpha",
           "overlap_mean", "tokens_per_target_forward", "formula_rel_error",
           "speedup_theory_params", "speedup_theory_time", "wall_speedup"]
print(summary[columns].to_string(), file=log)
print(f"chosen: {best.iloc[0]['reason']}", file=log)
print(f"greedy identical {int(greedy['identical'].sum())}/{len(greedy)}", file=log)
