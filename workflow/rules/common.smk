# Config validation and the helpers every rule file uses.

import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version, validate

# Job scripts import the inferlab package from this checkout through scripts/_checkout.py (also
# in conda jobs, where Snakemake clears PYTHONPATH). The rule files import its torch-free parts
# (lineage, configcheck, schemes) at parse time, from this checkout too (even when the Snakefile
# is a link from elsewhere), and the code hashes read, never import, the package's modules.
_CHECKOUT = str(Path(workflow.current_basedir).resolve().parents[1])
if sys.path[:1] != [_CHECKOUT]:
    sys.path.insert(0, _CHECKOUT)
from inferlab.jobs.lineage import load_parse_cache, save_parse_cache  # noqa: E402
from inferlab.jobs.template_lineage import rule_code_sha256  # noqa: E402

min_version("9.0")


def refuse(message):
    """A refusal at parse time reads as its message alone (the frames only with --verbose): a user reads
    the last lines first."""
    if workflow.output_settings.verbose:
        raise WorkflowError(message)
    print(message, file=sys.stderr)
    sys.exit(1)


try:
    validate(config, schema="../schemas/config.schema.yaml")
except WorkflowError as err:
    refuse(str(err))

CONDA_ENV = "../envs/inferlab.yaml"

from inferlab.corpus.check import corpus_check
from inferlab.jobs import configcheck
from inferlab.quant.schemes import SCHEMES
from inferlab.review.reproduce import checkpoint_members, config_problems as reproduce_config_problems

# what the corpus check found, kept between Snakemake starts by the file's size and mtime
CORPUS_CHECK_CACHE = Path(".snakemake/inferlab/corpus-check.json")


def _check_config():
    """Every cross-key rule (inferlab/jobs/configcheck.py) and the corpus as prepare_corpus would take it
    (inferlab/corpus/check.py), before any job can delete an output. Returns the corpus's stats (None before
    its download)."""
    source = Path(corpus_source())
    stats = None
    if source.is_file() and source.stat().st_size:  # else configcheck names the path, or the download makes it
        stats = corpus_check(source, config["corpus"]["val_fraction"], config["corpus"]["vocab_size"],
                             CORPUS_CHECK_CACHE)
    try:
        configcheck.check_config(config, corpus_stats=stats)
    except configcheck.ConfigError as err:
        refuse(str(err))
    for problem in reproduce_config_problems(config):
        refuse(problem)
    return stats


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
# The models train first, then every compile, then the rest. A compile takes one core and a timing or
# training job every core, so only compiles run two at once, and they should all be ready together:
# left to the scheduler's choice, the compiles whose models trained last ran alone at the end, one
# core idle beside each. The scheduler sums the priorities of the jobs it starts together, so a
# training outranks two compiles.
COMPILE_PRIORITY = 10
TRAIN_PRIORITY = 3 * COMPILE_PRIORITY
TARGET = config["target_model"]


def model_config(name):
    """Plain dict for inferlab.core.model.GPTConfig."""
    return {**config["architecture"], **config["models"][name],
            "vocab_size": config["corpus"]["vocab_size"]}


def train_config(name):
    """Training defaults with the model's overrides merged on top."""
    return configcheck.train_config(config, name)


def checkpoint(name):
    """The files that make up a trained model; rules take them as input."""
    return {"weights": f"results/models/{name}/model.safetensors",
            "meta": f"results/models/{name}/meta.json"}


def checkpoint_dir(name):
    return f"results/models/{name}"


# {name in the bundle: file}: every checkpoint of the run, trained or imported; the bundle carries them all.
BUNDLED_CHECKPOINTS = {member: f"results/{member}" for member in checkpoint_members(config)}
REPRODUCE = bool(config["reproduce"])


# The configured corpus_path is only ever an *input*. No rule outputs it, because
# Snakemake deletes a job's outputs before rerunning it, and the user's (or CI's
# read-only shared) copy must never be at risk. A download goes to its own file.
DOWNLOADED_CORPUS = "data/download/pg23950.txt"


def corpus_source():
    """The configured file when it exists, else the download rule's output."""
    return config["corpus_path"] if Path(config["corpus_path"]).is_file() else DOWNLOADED_CORPUS


# Code is part of the DAG: every rule has the param code_sha256=code_hash("<its script>"), the hash
# of its script and the inferlab modules it imports (inferlab/jobs/lineage.py), so a semantic edit to
# the package reruns exactly the rules whose code changed; a rule whose modules load templates (the
# report's Jinja2 layout) hashes those files too (inferlab/jobs/template_lineage.py). Compute rules
# (their numbers depend on the numeric stack) also hash the torch, numpy and Python versions.
SCRIPTS_DIR = Path(workflow.basedir) / "scripts"
COMPUTE_SCRIPTS = {"training_model", "kvcache_timing", "kvcache_steps", "kvcache_roofline_probe", "sampling_distribution",
                   "sampling_cell", "sampling_human", "speculative_group", "quant_scheme", "graphs_model",
                   "graphs_target_only", "graphs_round", "graphs_quant"}
_CODE_HASHES = {}
# the parses of the package's modules, kept between Snakemake starts (inferlab/jobs/lineage.py)
PARSE_CACHE = Path(".snakemake/inferlab/code-parses.json")
load_parse_cache(PARSE_CACHE)


def save_code_parses():
    """Called once every rule is defined, so the next start re-reads only edited modules."""
    save_parse_cache(PARSE_CACHE)


def code_hash(script):
    """code_sha256 of scripts/<script>.py: the param every rule declares."""
    if script not in _CODE_HASHES:
        _CODE_HASHES[script] = rule_code_sha256(SCRIPTS_DIR / f"{script}.py", workflow.basedir,
                                                compute=script in COMPUTE_SCRIPTS)
    return _CODE_HASHES[script]


def all_code_hashes():
    """{rule: current code_sha256} of every rule defined so far, for the report's staleness check.

    Also checks each rule's code_sha256 param names the script the rule runs, so the two cannot drift.
    """
    hashes = {}
    for defined in workflow.rules:
        if defined.script is None:
            continue
        script = Path(defined.script).stem
        declared = dict(defined.params.items()).get("code_sha256")
        if declared != code_hash(script):
            raise ValueError(f"{defined.name}: its param code_sha256 must be code_hash({script!r}), "
                             f"the script it runs")
        hashes[defined.name] = declared
    return hashes


def all_code_scripts():
    """{rule: its script, relative to the checkout}: the report names the modules behind a code change."""
    return {defined.name: f"scripts/{Path(defined.script).name}" for defined in workflow.rules
            if defined.script is not None}


def training_minutes(name):
    """Rough runtime request for cluster executors: ~10 min for the default target."""
    steps = train_config(name)["steps"]
    width = config["models"][name]["d_model"] / 256
    return max(5, int(steps / 500 * 15 * max(width, 0.25)))


CORPUS_STATS = _check_config()


def rule_output(rule, output):
    """rules.<rule>.output.<output> (a name) or .output[<output>] (an index), for rule files included later."""
    outputs = getattr(rules, rule).output
    return outputs[output] if isinstance(output, int) else getattr(outputs, output)


# The compiled engine's packages (workflow/rules/graphs.smk), as the inputs of the jobs that load them.
GRAPHS_DIR = "results/graphs"
COMPILED = "compiled" in config["engine"]


def model_graphs(name, key="graphs"):
    """A model's packages and their manifest, as rule inputs (none when no engine compiles)."""
    if not COMPILED:
        return {}
    return {key: f"{GRAPHS_DIR}/{name}", f"{key}_manifest": f"{GRAPHS_DIR}/{name}.json"}


def speed_graphs(scheme, kernel_schemes, reference):
    """A kernel scheme's packages and its reference's (fp32), as its scheme job's inputs; a quality-only
    scheme times nothing and takes none."""
    if scheme not in kernel_schemes:
        return {}
    return model_graphs(f"quant/{reference}", "reference_graphs") | model_graphs(f"quant/{scheme}", "kernel_graphs")


def calibrates(scheme):
    """Whether a quantization scheme (or the fp32 reference, which is none) calibrates on training data."""
    return scheme in SCHEMES and SCHEMES[scheme].method == "gptq"


def group_graphs(draft, k):
    """Everything a group job runs beyond the two models' forwards: target-only sampling's step, its rounds."""
    if not COMPILED:
        return {}
    return {"target_only_graphs": f"{GRAPHS_DIR}/target_only",
            "target_only_graphs_manifest": f"{GRAPHS_DIR}/target_only.json",
            "round_graphs": f"{GRAPHS_DIR}/rounds/{draft}_k{k}",
            "round_graphs_manifest": f"{GRAPHS_DIR}/rounds/{draft}_k{k}.json"}
