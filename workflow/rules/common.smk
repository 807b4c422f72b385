# Config validation and the helpers every rule file uses.

import os
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version, validate

min_version("9.0")


validate(config, schema="../schemas/config.schema.yaml")

# Job scripts import the inferlab package from this checkout, whether or not it is
# pip-installed (e.g. inside the conda env of `--sdm conda`).
os.environ.update(PYTHONPATH=os.pathsep.join(filter(None, [workflow.basedir, os.getenv("PYTHONPATH")])))
CONDA_ENV = "../envs/inferlab.yaml"


def _check_config():
    models = config["models"]
    if config["target_model"] not in models:
        raise ValueError(f"config key target_model: {config['target_model']!r} is not one of models {sorted(models)}")
    for draft in config["speculative"]["drafts"]:
        if draft not in models:
            raise ValueError(f"config key speculative.drafts: {draft!r} is not one of models {sorted(models)}")
    for name in config["training"].get("overrides", {}):
        if name not in models:
            raise ValueError(f"config key training.overrides.{name}: no such model in models")
    seq_len = train_config(config["target_model"])["seq_len"]
    if seq_len > config["architecture"]["max_seq_len"]:
        raise ValueError(f"config key training.defaults.seq_len: {seq_len} exceeds architecture.max_seq_len")


CORPUS_DIR = "results/corpus"
CORPUS = {
    "normalised": f"{CORPUS_DIR}/normalised.txt",
    "train": f"{CORPUS_DIR}/train.npy",
    "val": f"{CORPUS_DIR}/val.npy",
    "vocab": f"{CORPUS_DIR}/vocab.json",
    "stats": f"{CORPUS_DIR}/stats.json",
}
MODELS = list(config["models"])


def timing_threads():
    """Threads of a timing or training job.

    Locally all of --cores, so that nothing runs beside the measurement. A cluster executor
    has no total core count (workflow.cores raises): there the job asks for
    compute.timing_threads CPUs and the profile asks for the node exclusively
    (workflow/profiles/slurm/config.yaml). Inside the cluster job (remote mode, started
    with --cores all) it keeps that count, so the job uses the CPUs it requested.
    """
    if workflow.local_exec and not workflow.remote_exec:
        try:
            return workflow.cores
        except WorkflowError:
            pass
    return config["compute"]["timing_threads"]


TIMING_THREADS = timing_threads()
TARGET = config["target_model"]


def model_config(name):
    """Plain dict for inferlab.model.GPTConfig."""
    return {**config["architecture"], **config["models"][name],
            "vocab_size": config["corpus"]["vocab_size"]}


def train_config(name):
    """Training defaults with the model's overrides merged on top."""
    return {**config["training"]["defaults"], **config["training"].get("overrides", {}).get(name, {})}


def checkpoint(name):
    """The files that make up a trained model; rules take them as input."""
    return {"weights": f"results/models/{name}/model.safetensors",
            "meta": f"results/models/{name}/meta.json"}


def checkpoint_dir(name):
    return f"results/models/{name}"


# The configured corpus_path is only ever an *input*. No rule outputs it, because
# Snakemake deletes a job's outputs before rerunning it, and the user's (or CI's
# read-only shared) copy must never be at risk. A download goes to its own file.
DOWNLOADED_CORPUS = "data/download/pg23950.txt"


def corpus_source():
    """The configured file when it exists, else the download rule's output."""
    return config["corpus_path"] if Path(config["corpus_path"]).is_file() else DOWNLOADED_CORPUS


def training_minutes(name):
    """Rough runtime request for cluster executors: ~10 min for the default target."""
    steps = train_config(name)["steps"]
    width = config["models"][name]["d_model"] / 256
    return max(5, int(steps / 500 * 15 * max(width, 0.25)))


_check_config()
