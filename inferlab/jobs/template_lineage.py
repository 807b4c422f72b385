"""A rule's code hash with the templates its modules load (the report's Jinja2 layout is code too).

Kept out of lineage.py on purpose: every job script imports lineage.py, so any edit there changes
every rule's code hash and reruns the whole workflow; no job imports this module, so it changes
only what it hashes. The workflow (workflow/rules/common.smk) calls `rule_code_sha256` per rule.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from inferlab.jobs.lineage import canonical_sha256, code_sha256, file_sha256, import_closure

TEMPLATE_DIR = "templates"  # a folder of this name beside an imported module holds files it loads


def template_hashes(modules: Iterable[str], root: str | Path) -> dict[str, str]:
    """{path under root: sha256} of the files in the `templates/` folder beside each module."""
    root = Path(root)
    found: dict[str, str] = {}
    for name in modules:
        package = root.joinpath(*name.split("."))
        folder = (package if package.is_dir() else package.parent) / TEMPLATE_DIR
        if folder.is_dir():
            for file in sorted(p for p in folder.rglob("*") if p.is_file()):
                found[file.relative_to(root).as_posix()] = file_sha256(file)
    return dict(sorted(found.items()))


def rule_code_sha256(script: str | Path, root: str | Path, compute: bool) -> str:
    """lineage.code_sha256, combined with the template hashes when the script's modules load any:
    a rule without templates keeps exactly the hash it had."""
    code = code_sha256(script, root, compute)
    templates = template_hashes(import_closure(script, root), root)
    return canonical_sha256({"code": code, "templates": templates}) if templates else code
