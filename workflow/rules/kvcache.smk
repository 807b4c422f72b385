# Experiment 1: KV cache vs no cache, and the roofline.
#
#   kvcache_timing (one job per length) -> kvcache_summary -> roofline
#   kvcache_steps (single-step probe + profiler) -^           ^- roofline_probe
#
# Timing jobs take every core locally and a node of their own on a cluster (TIMING_THREADS,
# common.smk). With kvcache.device: cuda they also request one GPU: the resource gpu, which
# the SLURM executor turns into sbatch --gpus=1 (device auto requests none).

KV = config["kvcache"]
ROOFLINE = config["roofline"]
KV_LENGTHS = [int(n) for n in KV["lengths"]]
KV_DIR = "results/kvcache"
KV_GPUS = 1 if KV["device"] == "cuda" else 0


rule kvcache_timing:
    input:
        unpack(lambda w: model_graphs(TARGET)),
        **checkpoint(TARGET),
        vocab=CORPUS["vocab"],
    output:
        f"{KV_DIR}/timings/len{{length}}.parquet",
    params:
        code_sha256=code_hash("kvcache_timing"),
        model_name=TARGET,
        device=KV["device"],
        prompt=KV["prompt"],
        length=lambda w: int(w.length),
        reps=KV["reps"],
        warmup=KV["warmup"],
        engines=config["engine"],
    log:
        "logs/kvcache_timing/len{length}.log",
    benchmark:
        "results/benchmarks/kvcache_timing/len{length}.tsv"
    wildcard_constraints:
        length=r"\d+",
    threads: TIMING_THREADS
    resources:
        gpu=KV_GPUS,
        mem_mb=2000,
        # minutes, per engine: a fixed part plus the runs (reps + warm-up, both modes), whose uncached
        # work grows with length²; generous, since a cluster kills a job that outruns its request
        runtime=lambda w: len(config["engine"]) * (
            4 + int((KV["reps"] + KV["warmup"]) * 2 * (int(w.length) / 256) ** 2 * 6)),
    conda:
        CONDA_ENV
    script:
        "../../scripts/kvcache_timing.py"


rule kvcache_steps:
    input:
        unpack(lambda w: model_graphs(TARGET)),
        **checkpoint(TARGET),
        vocab=CORPUS["vocab"],
    output:
        steps=f"{KV_DIR}/steps.parquet",
        profile=f"{KV_DIR}/profile.parquet",
    params:
        code_sha256=code_hash("kvcache_steps"),
        model_name=TARGET,
        device=KV["device"],
        prompt=KV["prompt"],
        max_length=max(KV_LENGTHS),
        points=KV["step_points"],
        reps=KV["step_reps"],
        warmup=KV["warmup"],
        profile_steps=KV["profile_steps"],
        engines=config["engine"],
    log:
        "logs/kvcache_steps.log",
    benchmark:
        "results/benchmarks/kvcache_steps.tsv"
    threads: TIMING_THREADS
    resources:
        gpu=KV_GPUS,
        mem_mb=2000,
        runtime=lambda w: 5 * len(config["engine"]),
    conda:
        CONDA_ENV
    script:
        "../../scripts/kvcache_steps.py"


rule kvcache_summary:
    input:
        timings=expand(f"{KV_DIR}/timings/len{{length}}.parquet", length=KV_LENGTHS),
        steps=f"{KV_DIR}/steps.parquet",
        meta=checkpoint(TARGET)["meta"],
    output:
        timings=f"{KV_DIR}/timings.parquet",
        summary=f"{KV_DIR}/summary.parquet",
        fit=f"{KV_DIR}/fit.parquet",
    params:
        code_sha256=code_hash("kvcache_summary"),
        model_name=TARGET,
    log:
        "logs/kvcache_summary.log",
    benchmark:
        "results/benchmarks/kvcache_summary.tsv"
    conda:
        CONDA_ENV
    script:
        "../../scripts/kvcache_summary.py"


rule roofline_probe:
    input:
        meta=checkpoint(TARGET)["meta"],
    output:
        "results/roofline/probe.parquet",
    params:
        code_sha256=code_hash("kvcache_roofline_probe"),
        device=KV["device"],
        probe_mb=ROOFLINE["probe_mb"],
        matmul_size=ROOFLINE["matmul_size"],
        repeats=ROOFLINE["probe_repeats"],
    log:
        "logs/roofline_probe.log",
    benchmark:
        "results/benchmarks/roofline_probe.tsv"
    threads: TIMING_THREADS
    resources:
        gpu=KV_GPUS,
        mem_mb=lambda w: int(3 * ROOFLINE["probe_mb"]) + 1000,
        runtime=5,
    conda:
        CONDA_ENV
    script:
        "../../scripts/kvcache_roofline_probe.py"


rule roofline:
    input:
        anchor=ROOFLINE["anchor"],
        probe="results/roofline/probe.parquet",
        summary=f"{KV_DIR}/summary.parquet",
        meta=checkpoint(TARGET)["meta"],
    output:
        "results/roofline.parquet",
    params:
        code_sha256=code_hash("kvcache_roofline"),
        model_name=TARGET,
        anchor_context_tokens=ROOFLINE["anchor_context_tokens"],
    log:
        "logs/roofline.log",
    benchmark:
        "results/benchmarks/roofline.tsv"
    conda:
        CONDA_ENV
    script:
        "../../scripts/kvcache_roofline.py"
