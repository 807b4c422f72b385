"""Every repository path the documentation names exists: in README.md, docs/*.md and the READMEs of
config/, data/, logs/, reports/ and results/, in the comments of config/*.yaml and requirements.txt, and
in the text of config/*.json.

A path is a token that starts with a top-level folder of the repository (`inferlab/`, `workflow/`, …).
Placeholders match anything: `<name>`, `{stem}`, a lone capital letter (`workflow/rules/X.smk`), `*`,
`**` and `…`; `{a,b}` stands for both names. A trailing `:function`, `#anchor` or sentence punctuation
is not part of the path, and `inferlab/core/timing.burst_median_ms` names a module's attribute.
What a run writes (results/, logs/, data/, and reports/ but for its committed folders, such as
reports/reference/) is absent from a clean checkout, so it is checked only where git tracks files there.
"""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
         *(ROOT / folder / "README.md" for folder in ("config", "data", "logs", "reports", "results"))]
COMMENTED = [*sorted((ROOT / "config").glob("*.yaml")), ROOT / "requirements.txt"]
TOP_LEVEL = ("inferlab", "scripts", "workflow", "tools", "tests", "docs", "config", "reports", "results", "logs",
             "data", ".ci")
OUTPUT_ROOTS = ("results", "logs", "data", "reports")
# a top-level folder, then anything up to a space, a quote, a bracket or a table bar; not inside another
# path (../docs/x.md, ~/data/...)
_TOP = "|".join(re.escape(name) for name in TOP_LEVEL)
PATH = re.compile(rf"(?<![\w./~$@-])((?:{_TOP})/[^\s`'\"()|\]]*)")
PLACEHOLDER = re.compile(r"<[^<>/]*>|\{[^{},/]*\}|…|(?<![A-Za-z0-9])[A-Z](?![A-Za-z0-9])")


def _tree() -> tuple[set[str], set[str]]:
    """(the checkout's files that are not ignored, the folders holding them), from git."""
    try:
        listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                                capture_output=True, check=True).stdout.decode("utf-8")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("needs a git checkout to tell committed files from what a run writes")
    files = {name for name in listed.split("\0") if name and (ROOT / name).exists()}
    folders = {str(parent) for name in files for parent in Path(name).parents if str(parent) != "."}
    return files, folders


def _yaml_comments(text: str) -> str:
    """The text of every # comment (YAML, requirements.txt): at a line's start or after a space."""
    return "\n".join(match.group(1) for match in re.finditer(r"(?:^|\s)#(.*)$", text, re.MULTILINE))


def _json_strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in _json_strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in _json_strings(item)]
    return []


def named_paths(text: str) -> list[str]:
    """The repository paths a text names, as written (trailing punctuation and anchors removed)."""
    found = []
    for match in PATH.finditer(text):
        path = re.split(r"[#:]", match.group(1), maxsplit=1)[0].rstrip(".,;")
        if "@" not in path and path not in found:  # inferlab/precomputed@1 is a schema id
            found.append(path)
    return found


def _patterns(path: str) -> list[str]:
    """Glob patterns for a named path: placeholders as *, {a,b} as one pattern each, no trailing slash."""
    brace = re.search(r"\{([^{}]*,[^{}]*)\}", path)
    if brace:
        return [p for choice in brace.group(1).split(",")
                for p in _patterns(path[:brace.start()] + choice + path[brace.end():])]
    return [PLACEHOLDER.sub("*", path).rstrip("/")]


def is_output(path: str, folders: set[str]) -> bool:
    """Written by a run (so absent from a clean checkout), unless git tracks the folder it is in."""
    parts = path.split("/")
    if parts[0] not in OUTPUT_ROOTS or parts[-1] == "README.md":
        return False
    committed = {folder for folder in folders if "/" in folder and folder.split("/")[0] in OUTPUT_ROOTS}
    return not any(path.rstrip("/") == folder or path.startswith(folder + "/") for folder in committed)


def _matches(pattern: str, files: set[str], folders: set[str]) -> bool:
    if any(fnmatch.fnmatchcase(name, pattern) for name in files | folders):
        return True
    stem, dot, _ = pattern.rpartition(".")
    return bool(dot) and "/" in stem and f"{stem}.py" in files  # a module's attribute: inferlab/core/timing.x


def exists(path: str, files: set[str], folders: set[str]) -> bool:
    """Every name the path stands for ({a,b}: both) matches a file or folder of the checkout."""
    return all(_matches(pattern, files, folders) for pattern in _patterns(path))


def missing_paths(source: str, text: str, files: set[str], folders: set[str]) -> list[str]:
    return [f"{source}: {path}" for path in named_paths(text)
            if not is_output(path, folders) and not exists(path, files, folders)]


def _sources() -> list[tuple[str, str]]:
    sources = [(str(page.relative_to(ROOT)), page.read_text(encoding="utf-8")) for page in PAGES]
    sources += [(str(path.relative_to(ROOT)), _yaml_comments(path.read_text(encoding="utf-8")))
                for path in COMMENTED]
    sources += [(str(path.relative_to(ROOT)), "\n".join(_json_strings(json.loads(path.read_text(encoding="utf-8")))))
                for path in sorted((ROOT / "config").glob("*.json"))]
    return sources


@pytest.mark.parametrize("source", [name for name, _ in _sources()])
def test_every_path_the_documentation_names_exists(source):
    files, folders = _tree()
    text = dict(_sources())[source]
    missing = missing_paths(source, text, files, folders)
    assert not missing, "paths named that are not in the checkout:\n  " + "\n  ".join(missing)


def test_the_path_check_finds_paths_and_can_fail():
    files, folders = _tree()
    text = ("See `inferlab/core/engine.py`, inferlab/kvcache/roofline.py, `inferlab/<experiment>/spec.py`, "
            "`workflow/rules/X.smk`, `results/{milestones,metrics}.parquet`, `inferlab/core/timing.burst_median_ms`, "
            "[doc](docs/faults.md#checked-before-any-job-runs), `inferlab/quant/bench.py:run_scheme`, "
            "`reports/c13-report.html`, ../shared/data/x.txt and the schema inferlab/precomputed@1.\n"
            "Gone: `inferlab/roofline.py`, tests/test_nothing_here.py, `reports/reference/nope.parquet`, "
            "`docs/{faults,nope}.md`.")
    assert named_paths(text) == [
        "inferlab/core/engine.py", "inferlab/kvcache/roofline.py", "inferlab/<experiment>/spec.py",
        "workflow/rules/X.smk", "results/{milestones,metrics}.parquet", "inferlab/core/timing.burst_median_ms",
        "docs/faults.md", "inferlab/quant/bench.py", "reports/c13-report.html", "inferlab/roofline.py",
        "tests/test_nothing_here.py", "reports/reference/nope.parquet", "docs/{faults,nope}.md"]
    assert missing_paths("page.md", text, files, folders) == [
        "page.md: inferlab/roofline.py", "page.md: tests/test_nothing_here.py",
        "page.md: reports/reference/nope.parquet", "page.md: docs/{faults,nope}.md"]


def test_config_comments_are_read_and_values_are_not():
    assert _yaml_comments("a: results/x.parquet  # see inferlab/gone.py\n# and tools/gone.py\n") == (
        " see inferlab/gone.py\n and tools/gone.py")
    assert _json_strings({"what": "inferlab/x.py", "n": [1, "tools/y.py"]}) == ["inferlab/x.py", "tools/y.py"]
