# Reproduction (config reproduce=<bundle or run directory>): the training rules' outputs imported from a
# published run instead of trained. The Snakefile includes this file in place of training.smk, so a wrong
# path is refused here and can never fall back to training. Every check runs now, before any job
# (inferlab/review/reproduce.py); each import copies one member out as a real file, and ensure() checks
# its sha256 against the published manifest again once written.

from inferlab.review import reproduce as published_run


def _member_configs():
    """{member folder: the model config its checkpoint must have}: each model, and the target per noise seed."""
    folders = {f"models/{name}": model_config(name) for name in MODELS}
    return folders | {f"noise/seed{seed}": model_config(TARGET) for seed in config["noise_floor"]["extra_seeds"]}


try:
    PUBLISHED = published_run.open_source(config["reproduce"], config["reproduce_sha256"], workdir=Path.cwd())
    IMPORTED = published_run.check_source(PUBLISHED, config, _member_configs(),
                                          (CORPUS_STATS or {}).get("raw_sha256"))
except (published_run.ReproduceError, OSError) as err:
    refuse(f"reproduce: {err}")

# the code an imported checkpoint is current against: the training code its published run recorded
IMPORTED_CODE = published_run.training_code(PUBLISHED, IMPORTED)
PUBLISHED_METRICS = "results/reproduce/published-metrics.parquet"


def _source_files(members):
    """What an import job reads: the bundle, or the run directory's files (so that an edit there reruns it)."""
    if PUBLISHED.kind == "bundle":
        return [config["reproduce"]]
    return [f"{config['reproduce']}/results/{member}" for member in members]


def _checked(file):
    """An imported checkpoint file, checked against the sha256 the published manifest gives its member."""
    return ensure(f"results/{{folder}}/{file}", sha256=lambda w: IMPORTED[f"{w.folder}/{file}"])


# Each model's and each noise rerun's checkpoint: the outputs of train_model and train_noise_rerun.
rule import_checkpoint:
    input:
        lambda w: _source_files([f"{w.folder}/{file}" for file in published_run.CHECKPOINT_FILES]),
    output:
        weights=_checked("model.safetensors"),
        meta=_checked("meta.json"),
        curve=_checked("loss_curve.parquet"),
    params:
        code_sha256=code_hash("reproduce_import"),
        source=config["reproduce"],
        members=lambda w: [f"{w.folder}/{file}" for file in published_run.CHECKPOINT_FILES],
    log:
        "logs/import/{folder}.log",
    wildcard_constraints:
        folder=rf"models/({'|'.join(MODELS)})|noise/seed-?\d+",
    localrule: True
    conda:
        CONDA_ENV
    script:
        "../../scripts/reproduce_import.py"


rule import_published_metrics:
    input:
        _source_files([published_run.METRICS]),
    output:
        metrics=ensure(PUBLISHED_METRICS, sha256=IMPORTED[published_run.METRICS]),
    params:
        code_sha256=code_hash("reproduce_import"),
        source=config["reproduce"],
        members=[published_run.METRICS],
    log:
        "logs/import/published_metrics.log",
    localrule: True
    conda:
        CONDA_ENV
    script:
        "../../scripts/reproduce_import.py"
