# Training: the three models and the noise-floor reruns of the target. With config reproduce=… the
# Snakefile includes reproduce.smk instead, whose import rules have the same outputs.


rule train_model:
    input:
        train=CORPUS["train"],
        val=CORPUS["val"],
        stats=CORPUS["stats"],
    output:
        weights="results/models/{model}/model.safetensors",
        meta="results/models/{model}/meta.json",
        curve="results/models/{model}/loss_curve.parquet",
    params:
        code_sha256=code_hash("training_model"),
        name="{model}",
        model_config=lambda w: model_config(w.model),
        train_config=lambda w: train_config(w.model),
    log:
        "logs/train/{model}.log",
    benchmark:
        "results/benchmarks/train/{model}.tsv"
    wildcard_constraints:
        model="|".join(MODELS),
    threads: TIMING_THREADS
    priority: TRAIN_PRIORITY
    resources:
        mem_mb=4000,
        runtime=lambda w: training_minutes(w.model),
    conda:
        CONDA_ENV
    script:
        "../../scripts/training_model.py"


rule train_noise_rerun:
    input:
        train=CORPUS["train"],
        val=CORPUS["val"],
        stats=CORPUS["stats"],
    output:
        weights="results/noise/seed{seed}/model.safetensors",
        meta="results/noise/seed{seed}/meta.json",
        curve="results/noise/seed{seed}/loss_curve.parquet",
    params:
        code_sha256=code_hash("training_model"),
        name=lambda w: f"{TARGET}_seed{w.seed}",
        model_config=lambda w: model_config(TARGET),
        train_config=lambda w: {**train_config(TARGET), "seed": int(w.seed)},
    log:
        "logs/train/noise_seed{seed}.log",
    benchmark:
        "results/benchmarks/train/noise_seed{seed}.tsv"
    wildcard_constraints:
        seed=r"-?\d+",
    threads: TIMING_THREADS
    resources:
        mem_mb=4000,
        runtime=lambda w: training_minutes(TARGET),
    conda:
        CONDA_ENV
    script:
        "../../scripts/training_model.py"
