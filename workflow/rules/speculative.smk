# Experiment 3: speculative sampling. One job per group (draft, k), which also times its own
# baseline, target-only sampling, interleaved with its runs (a same-job wall-clock ratio), and a
# summary that compares measured yield with the formula.

SPEC = config["speculative"]
SPEC_DIR = "results/speculative"
SPEC_GROUPS = [f"{draft}_k{k}" for draft in SPEC["drafts"] for k in SPEC["ks"]]


# The prompts, seeds and sampling settings shared by the groups.
SPEC_DECODE_PARAMS = {key: SPEC[key] for key in ("prompts", "seeds", "new_tokens", "temperature", "top_p",
                                                   "timing_reps")} | {"engines": config["engine"]}
# Runtime request (minutes, per engine): each prompt decodes seeds x reps times plus two untimed
# passes, each twice (speculative and target-only), budgeted at 2,000 decoded tokens a minute, slow
# enough that a small CPU finishes inside it (a cluster kills a job that outruns its request).
SPEC_MINUTES = len(config["engine"]) * max(5, 2 * len(SPEC["prompts"]) * (len(SPEC["seeds"]) * SPEC["timing_reps"] + 2)
                                           * SPEC["new_tokens"] // 2000 + 3)


rule speculative_group:
    input:
        unpack(lambda w: model_graphs(TARGET, "target_graphs") | model_graphs(w.draft, "draft_graphs")
               | group_graphs(w.draft, w.k)),
        target_weights=checkpoint(TARGET)["weights"],
        target_meta=checkpoint(TARGET)["meta"],
        draft_weights=lambda w: checkpoint(w.draft)["weights"],
        draft_meta=lambda w: checkpoint(w.draft)["meta"],
        vocab=CORPUS["vocab"],
    output:
        runs=f"{SPEC_DIR}/groups/{{draft}}_k{{k}}.parquet",
        greedy=f"{SPEC_DIR}/groups/{{draft}}_k{{k}}_greedy.parquet",
        forward=f"{SPEC_DIR}/groups/{{draft}}_k{{k}}_forward.parquet",
        target_only=f"{SPEC_DIR}/groups/{{draft}}_k{{k}}_target_only.parquet",
    params:
        code_sha256=code_hash("speculative_group"),
        target=TARGET,
        draft=lambda w: w.draft,
        k=lambda w: int(w.k),
        forward_reps=SPEC["forward_reps"],
        **SPEC_DECODE_PARAMS,
    log:
        "logs/speculative/group/{draft}_k{k}.log",
    benchmark:
        "results/benchmarks/speculative_group/{draft}_k{k}.tsv"
    wildcard_constraints:
        draft="|".join(SPEC["drafts"]),
        k=r"\d+",
    threads: TIMING_THREADS
    resources:
        mem_mb=2000,
        runtime=SPEC_MINUTES,
    conda:
        CONDA_ENV
    script:
        "../../scripts/speculative_group.py"


rule speculative_summary:
    input:
        runs=expand(f"{SPEC_DIR}/groups/{{group}}.parquet", group=SPEC_GROUPS),
        greedy=expand(f"{SPEC_DIR}/groups/{{group}}_greedy.parquet", group=SPEC_GROUPS),
        forward=expand(f"{SPEC_DIR}/groups/{{group}}_forward.parquet", group=SPEC_GROUPS),
        target_only=expand(f"{SPEC_DIR}/groups/{{group}}_target_only.parquet", group=SPEC_GROUPS),
        target_meta=checkpoint(TARGET)["meta"],
        draft_metas=[checkpoint(draft)["meta"] for draft in SPEC["drafts"]],
        probe="results/roofline/probe.parquet",  # the bandwidth each step is held against
    output:
        # Parquet is binary, so Snakemake's report shows the speculative figure instead.
        summary=f"{SPEC_DIR}/summary.parquet",
        best=f"{SPEC_DIR}/best.parquet",
        greedy=f"{SPEC_DIR}/greedy_identity.parquet",
        runs=f"{SPEC_DIR}/runs.parquet",
    params:
        code_sha256=code_hash("speculative_summary"),
        target=TARGET,
        drafts=SPEC["drafts"],
    log:
        "logs/speculative/summary.log",
    conda:
        CONDA_ENV
    script:
        "../../scripts/speculative_summary.py"
