"""Checks of the whole configuration that a JSON schema cannot express, run when the workflow is parsed.

Pure functions of the plain config dict (and, when they exist, the prepared corpus's stats), so
`snakemake -n` catches a bad config before any job deletes an output. Torch-free on purpose:
parsing must stay fast. Every problem names the config key and the rule it breaks.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from inferlab.kvcache.anchor import load_anchor
from inferlab.quant.schemes import SCHEMES

# A floor from fewer runs is reported as unreliable; the config must opt down explicitly.
RELIABLE_NOISE_RUNS = 3
# Token ids are stored as uint16 (results/corpus/*.npy).
MAX_VOCAB_SIZE = 1 << 16


class ConfigError(ValueError):
    """All the problems found, one per line."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__(f"{len(problems)} problem(s) in the configuration:\n" +
                         "\n".join(f"  - {p}" for p in problems))


def train_config(config: dict, name: str) -> dict:
    """Training defaults with the model's overrides merged on top."""
    return {**config["training"]["defaults"], **config["training"].get("overrides", {}).get(name, {})}


def _training_key(config: dict, name: str, key: str) -> str:
    """The config key a model's training setting comes from."""
    if key in config["training"].get("overrides", {}).get(name, {}):
        return f"training.overrides.{name}.{key}"
    return f"training.defaults.{key}"


def model_name_problems(config: dict) -> list[str]:
    models = sorted(config["models"])
    problems = []
    if config["target_model"] not in models:
        problems.append(f"target_model: {config['target_model']!r} is not one of models {models}")
    problems += [f"speculative.drafts: {d!r} is not one of models {models}"
                 for d in config["speculative"]["drafts"] if d not in models]
    problems += [f"training.overrides.{name}: no such model in models {models}"
                 for name in config["training"].get("overrides", {}) if name not in models]
    return problems


def shape_problems(config: dict) -> list[str]:
    """Attention splits d_model into heads of head_dim; positions stop at max_seq_len."""
    arch = config["architecture"]
    problems = []
    for name, model in config["models"].items():
        d_model = model["d_model"]
        if d_model < arch["head_dim"] or d_model % arch["head_dim"]:
            problems.append(f"models.{name}.d_model: {d_model} is not a positive multiple of "
                            f"architecture.head_dim ({arch['head_dim']}); attention splits d_model into heads")
        seq_len = train_config(config, name)["seq_len"]
        if seq_len > arch["max_seq_len"]:
            problems.append(f"{_training_key(config, name, 'seq_len')}: {seq_len} for model {name} exceeds "
                            f"architecture.max_seq_len ({arch['max_seq_len']})")
    return problems


def draft_problems(config: dict) -> list[str]:
    """Speculative sampling only pays when the draft is cheaper than the target."""
    target = config["target_model"]
    if target not in config["models"]:
        return []
    target_width = config["models"][target]["d_model"]
    problems = []
    for draft in config["speculative"]["drafts"]:
        if draft == target:
            problems.append(f"speculative.drafts: {draft!r} is the target_model; a draft must be a smaller model")
        elif draft in config["models"] and config["models"][draft]["d_model"] >= target_width:
            problems.append(f"speculative.drafts: {draft!r} (d_model {config['models'][draft]['d_model']}) is not "
                            f"smaller than the target {target!r} (d_model {target_width}); a draft must have "
                            f"fewer parameters than the target")
    return problems


def noise_problems(config: dict) -> list[str]:
    """Reruns must differ from each other and from the base run, or the floor shrinks to nothing."""
    floor = config["noise_floor"]
    seeds = floor["extra_seeds"]
    problems = [f"noise_floor.extra_seeds: seed {seed} is listed {n} times; each rerun needs its own seed"
                for seed, n in Counter(seeds).items() if n > 1]
    if config["target_model"] in config["models"]:
        base_seed = train_config(config, config["target_model"])["seed"]
        if base_seed in seeds:
            problems.append(f"noise_floor.extra_seeds: {base_seed} is the target's training seed "
                            f"({_training_key(config, config['target_model'], 'seed')}); that rerun would "
                            f"repeat the base run exactly and shrink the floor")
    runs = 1 + len(set(seeds))
    min_runs = floor.get("min_runs", RELIABLE_NOISE_RUNS)
    if runs < min_runs:
        problems.append(f"noise_floor.extra_seeds: {runs} run(s) in all (the base run + {len(set(seeds))} "
                        f"rerun(s)); the floor needs at least {min_runs} (noise_floor.min_runs)")
    return problems


def token_budgets(config: dict) -> list[tuple[str, int, str]]:
    """(config key, tokens, what they are) for every key that sets how many tokens a job feeds one model.

    The one rule every such key obeys: the tokens one forward or generation holds must fit the
    context (architecture.max_seq_len). Prompts are character-tokenized: one token per character.
    """
    def longest(prompts) -> int:
        return max((len(p) for p in prompts), default=0)

    kv, rep, spec = config["kvcache"], config["sampling"]["repetition"], config["speculative"]
    budgets = [
        ("kvcache.lengths", len(kv["prompt"]) + max(kv["lengths"], default=0),
         "kvcache.prompt + the longest of kvcache.lengths"),
        ("sampling.prompt", len(config["sampling"]["prompt"]), "the distribution prompt"),
        ("sampling.repetition.new_tokens", longest(rep["prompts"]) + rep["new_tokens"],
         "the longest repetition prompt + new tokens (each human reference window is as long)"),
        ("speculative.new_tokens", longest(spec["prompts"]) + spec["new_tokens"] + max(spec["ks"], default=0),
         "the longest speculative prompt + new tokens + the largest k"),
    ]
    speed = config["quantization"].get("speed")
    if speed:
        budgets.append(("quantization.speed.new_tokens", len(speed["prompt"]) + speed["new_tokens"],
                        "quantization.speed.prompt + new tokens"))
    return budgets


def length_problems(config: dict) -> list[str]:
    context = config["architecture"]["max_seq_len"]
    return [f"{key}: {what} = {tokens} tokens, more than the context architecture.max_seq_len ({context})"
            for key, tokens, what in token_budgets(config) if tokens > context]


def quant_problems(config: dict) -> list[str]:
    known = list(SCHEMES)
    return [f"quantization.schemes: {name!r} is not a known scheme; known: {known}"
            for name in config["quantization"]["schemes"] if name not in known]


def corpus_problems(config: dict, corpus_stats: dict | None) -> list[str]:
    """What the configured corpus and, once prepared, its stats allow."""
    problems = []
    path = Path(config["corpus_path"])
    if path.is_dir():
        problems.append(f"corpus_path: {path} is a directory, not the corpus text file")
    elif path.is_file() and path.stat().st_size == 0:
        problems.append(f"corpus_path: {path} is an empty file")
    url = config.get("corpus_url", "")
    if url and not url.startswith("https://"):
        problems.append(f"corpus_url: {url!r} is not an https:// URL; the download accepts https only")
    vocab_size = config["corpus"]["vocab_size"]
    if vocab_size > MAX_VOCAB_SIZE:
        problems.append(f"corpus.vocab_size: {vocab_size} exceeds {MAX_VOCAB_SIZE} (token ids are stored as uint16)")
    if corpus_stats:
        problems += _corpus_file_problems(config, corpus_stats)
    return problems


def _corpus_file_problems(config: dict, stats: dict) -> list[str]:
    """What prepare_corpus would refuse in the file (inferlab.corpus.check), and a copy the pin does not match."""
    pinned = config.get("corpus_sha256")
    if pinned and stats["raw_sha256"] != pinned:
        return [f"corpus_path: {config['corpus_path']} ({stats['raw_bytes']:,} bytes, sha256 "
                f"{stats['raw_sha256'][:12]}…) is not the file corpus_sha256 pins ({pinned[:12]}…): a truncated "
                "or edited copy? Copy the corpus again, or set corpus_sha256 to this file's sha256 (or null) "
                "to accept it"]
    if "problem" in stats:
        return [f"corpus_path: {stats['problem']}"]
    return _prepared_corpus_problems(config, stats)


def _prepared_corpus_problems(config: dict, stats: dict) -> list[str]:
    problems = []
    # A changed val_fraction moves the split: then only the whole text's counts still hold.
    same_split = stats.get("val_fraction_requested") == config["corpus"]["val_fraction"]
    distinct = stats.get("train_distinct_chars", stats["distinct_chars"]) if same_split else stats["distinct_chars"]
    vocab_size = config["corpus"]["vocab_size"]
    if vocab_size > distinct + 1:
        problems.append(f"corpus.vocab_size: {vocab_size} exceeds the {distinct} distinct characters of the "
                        f"corpus's training text + <unk> ({distinct + 1})")
    if not same_split:
        return problems
    for name in config["models"]:
        cfg = train_config(config, name)
        need = {"val": validation_chars_needed(cfg["seq_len"]),
                "train": training_chars_needed(cfg["seq_len"], cfg["batch_size"])}
        for split, needed in need.items():
            if stats[f"{split}_chars"] < needed:
                problems.append(f"{_training_key(config, name, 'seq_len')}: model {name} needs {needed} characters "
                                f"in the {split} split, the corpus's has {stats[f'{split}_chars']} "
                                f"(corpus.val_fraction)")
    return problems


def validation_chars_needed(seq_len: int) -> int:
    """One (input, target) window of seq_len + 1 characters, plus one start offset to draw from."""
    return seq_len + 2


def training_chars_needed(seq_len: int, batch_size: int) -> int:
    """Enough for a batch of windows at distinct offsets."""
    return seq_len + 1 + batch_size


def anchor_problems(config: dict) -> list[str]:
    try:
        load_anchor(config["roofline"]["anchor"])
    except ValueError as err:
        return [f"roofline.anchor: {err}"]
    return []


def config_problems(config: dict, corpus_stats: dict | None = None) -> list[str]:
    problems = model_name_problems(config)
    if problems:  # the other checks look models up by these names
        return problems
    return [*shape_problems(config), *length_problems(config), *draft_problems(config), *noise_problems(config),
            *quant_problems(config), *corpus_problems(config, corpus_stats), *anchor_problems(config)]


def check_config(config: dict, corpus_stats: dict | None = None) -> None:
    problems = config_problems(config, corpus_stats)
    if problems:
        raise ConfigError(problems)

