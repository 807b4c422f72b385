"""A config fuzzer (issue 24): overlays drawn from the schema's shape, each refused at parse time
with a message that names a key, or accepted by every parse-time step the workflow runs.

Listing faults by hand always misses some (a cross-key length, an empty list); here Hypothesis
draws them: wrong types, values at and past the bounds, empty and duplicated lists, unknown enum
values, token counts near and past the context, and cross-key mixes (draft vs target widths,
seeds, prompts). "Parse" is what `snakemake -n` does before any job can run: the schema
(snakemake.utils.validate, defaults filled), inferlab.jobs.configcheck, and the rule files'
parse-time helpers. Two accepted overlays then go through a real `snakemake -n` and
the cheapest job. The seed is fixed (derandomize), so CI and a developer see the same cases.
"""

from __future__ import annotations

import copy
import functools
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from inferlab.corpus.check import corpus_facts
from inferlab.jobs.configcheck import config_problems, train_config
from inferlab.quant.schemes import SCHEMES
from inferlab.review.reproduce import ReproduceError, open_source
from inferlab.review.reproduce import config_problems as reproduce_problems
from inferlab.sampling.grid import repetition_cells, sampling_cells
from tests.conftest import synthetic_corpus
from tests.test_workflow_e2e import SNAKEMAKE, TINY, _merge

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = str(ROOT / "workflow/schemas/config.schema.yaml")
BASE = _merge(_merge(yaml.safe_load((ROOT / "config/config.yaml").read_text(encoding="utf-8")),
                     yaml.safe_load((ROOT / "config/quick.yaml").read_text(encoding="utf-8"))), TINY)
BASE["roofline"]["anchor"] = str(ROOT / "config/anchor-model.json")
CONTEXT = BASE["architecture"]["max_seq_len"]
# a key a refusal names: schema errors say where ("['kvcache']['reps']"); configcheck says "kvcache.reps:"
KEY_IN_MESSAGE = re.compile(r"\['[A-Za-z0-9_]+'\]|^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*: ")


def _leaves(node, path=()):
    """Every key path of the config, containers included (a container can be replaced whole)."""
    if path:
        yield path
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, (*path, key))


LEAVES = sorted(_leaves(BASE), key=repr)
TOKEN_KEYS = [("sampling", "repetition", "new_tokens"), ("speculative", "new_tokens"),
              ("quantization", "speed", "new_tokens")]

scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.integers(CONTEXT - 8, CONTEXT + 8),
                    st.sampled_from([0, 1, 2**31, -(2**31)]), st.floats(-1.5, 1.5, allow_nan=False),
                    st.sampled_from(["", "x", "孔明曰：「", "字" * (CONTEXT + 1), "auto", "int5_magic"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(st.sampled_from(["a", "d_model", "seed"]),
                                                                      inner, max_size=2)), max_leaves=4)


@st.composite
def overlays(draw) -> tuple[str, dict]:
    """(what was changed, the full config after it)."""
    config = copy.deepcopy(BASE)
    kind = draw(st.sampled_from(["replace", "list", "tokens", "cross"]))
    if kind == "replace":
        path = draw(st.sampled_from(LEAVES))
        _set(config, path, draw(values))
    elif kind == "list":
        lists = [p for p in LEAVES if isinstance(_get(BASE, p), list) and _get(BASE, p)]
        path = draw(st.sampled_from(lists))
        items = _get(BASE, path)
        _set(config, path, draw(st.sampled_from([[], items + items[:1], items[::-1], [items[0]] * 3])))
    elif kind == "tokens":
        path = draw(st.sampled_from(TOKEN_KEYS))
        _set(config, path, draw(st.integers(CONTEXT - 40, CONTEXT + 4)))
    else:
        path = ("cross",)
        target, drafts = config["target_model"], config["speculative"]["drafts"]
        change = draw(st.sampled_from(["draft_wide", "seed_clash", "target_is_draft", "long_prompt", "no_drafts"]))
        if change == "draft_wide":
            config["models"][drafts[0]]["d_model"] = config["models"][target]["d_model"] * draw(st.sampled_from([1, 2]))
        elif change == "seed_clash":
            config["noise_floor"]["extra_seeds"] = [train_config(config, target)["seed"]]
        elif change == "target_is_draft":
            config["target_model"] = drafts[0]
        elif change == "long_prompt":
            config["speculative"]["prompts"] = ["字" * draw(st.integers(CONTEXT - 30, CONTEXT))]
        else:
            config["speculative"]["drafts"] = []
        path = (change,)
    return ".".join(map(str, path)), config


def _get(config, path):
    for key in path:
        config = config[key]
    return config


def _set(config, path, value):
    _get(config, path[:-1])[path[-1]] = value


def parse(config: dict) -> list[str]:
    """The refusals of everything `snakemake -n` runs before a job; [] when the config is accepted.

    Any exception other than a refusal escapes: that is an unhandled case, the bug this hunts.
    """
    try:
        validate(config, SCHEMA)
    except WorkflowError as err:
        return [str(err)]
    problems = config_problems(config, _corpus_facts(config["corpus"]["val_fraction"], config["corpus"]["vocab_size"]))
    if problems:
        return problems
    # the rule files' parse-time helpers (sampling.smk, quant.smk, training.smk)
    sampling_cells(config["sampling"])
    repetition_cells(config["sampling"])
    for scheme in config["quantization"]["schemes"]:
        SCHEMES[scheme].method  # noqa: B018  (a KeyError here would be an unchecked scheme)
    for name in config["models"]:
        train_config(config, name)
    if reproduce_problems(config):
        return reproduce_problems(config)
    if config["reproduce"]:  # reproduce.smk, included in place of training.smk
        try:
            open_source(config["reproduce"], config["reproduce_sha256"])
        except ReproduceError as err:
            return [f"reproduce: {err}"]
    return []


ACCEPTED: list[dict] = []
# the corpus the accepted overlays' real dry run reads: `snakemake -n` checks it too
CORPUS = synthetic_corpus(n_chapters=14, paragraphs=8)


@functools.cache
def _corpus_facts(val_fraction, vocab_size) -> dict:
    return corpus_facts(CORPUS.encode("utf-8"), val_fraction, vocab_size)


@settings(max_examples=int(os.environ.get("INFERLAB_FUZZ_EXAMPLES", "300")), deadline=None, derandomize=True,
          database=None, suppress_health_check=[HealthCheck.too_slow])
@given(overlays())
def test_every_fuzzed_config_is_refused_by_key_or_accepted(case):
    changed, config = case
    problems = parse(config)
    for problem in problems:
        assert KEY_IN_MESSAGE.search(problem), f"{changed}: a refusal that names no key: {problem}"
    if not problems and len(ACCEPTED) < 2 and changed != "cross":
        ACCEPTED.append(config)


@pytest.mark.slow
def test_accepted_fuzzed_configs_pass_a_real_dry_run_and_the_cheapest_job(tmp_path):
    """Two accepted overlays through `snakemake -n`, the first also through prepare_corpus."""
    if not ACCEPTED:  # run alone: draw the sample here
        test_every_fuzzed_config_is_refused_by_key_or_accepted()
    assert ACCEPTED, "the fuzzer accepted no overlay: the strategy only draws refusals"
    from tests.conftest import link_workflow
    link_workflow(tmp_path, package=True)
    (tmp_path / "corpus.txt").write_text(CORPUS, encoding="utf-8")
    for i, config in enumerate(ACCEPTED):
        overlay = tmp_path / f"fuzz{i}.yaml"
        overlay.write_text(yaml.safe_dump({**config, "corpus_path": "corpus.txt"}, allow_unicode=True),
                           encoding="utf-8")
        args = [*SNAKEMAKE, "--cores", "2", "--configfile", overlay.name]
        dry = subprocess.run([*args, "-n"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert dry.returncode == 0, dry.stdout[-2000:] + dry.stderr[-3000:]
        if i == 0:
            job = subprocess.run([*args, "--", "results/corpus/stats.json"], cwd=tmp_path, capture_output=True,
                                 text=True, timeout=300)
            assert job.returncode == 0 or "Traceback" not in job.stderr, job.stderr[-3000:]
