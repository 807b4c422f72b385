# The noise floor of validation loss, from the target and its reruns (trained or imported).

NOISE_METAS = [f"results/noise/seed{s}/meta.json" for s in config["noise_floor"]["extra_seeds"]]


rule noise_floor:
    input:
        base=checkpoint(TARGET)["meta"],
        reruns=NOISE_METAS,
    output:
        "results/noise_floor.parquet",
    params:
        code_sha256=code_hash("training_noise_floor"),
        sigmas=config["noise_floor"]["sigmas"],
        use=config["noise_floor"]["use"],
        fixed_value=config["noise_floor"]["fixed_value"],
    log:
        "logs/noise_floor.log",
    conda:
        CONDA_ENV
    script:
        "../../scripts/training_noise_floor.py"
