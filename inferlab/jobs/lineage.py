"""Code lineage: which code a job runs, and the record every output carries of it.

Torch-free and import-light: the workflow calls `code_sha256` while it parses, for every rule,
so it reads the package's files with `ast` and never imports them.

A rule's code identity is the hash of
  1. its script's AST and the AST of every `inferlab` module the script imports, transitively
     (with each package's `__init__.py` on the way), all with docstrings removed: comments,
     docstrings and formatting vanish, so only edits that change what runs change the hash;
  2. for compute rules (whose numbers depend on the numeric stack), the versions of torch,
     numpy and Python.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import platform
import subprocess
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path

PACKAGE = "inferlab"
CHECKOUT = Path(__file__).resolve().parents[2]  # the checkout holding this package
NUMERIC_STACK = ("torch", "numpy")

_ast_cache: dict[tuple[Path, int, int], tuple[str, frozenset[str]]] = {}
_ast_cache_used: set[tuple[Path, int, int]] = set()
_job_lineage: dict | None = None


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def canonical_sha256(value) -> str:
    """sha256 of canonical JSON (sorted keys, json's default separators): equal settings hash equally.

    The one hash of settings: every job's config_sha256 and the run's (the pinned reference's too).
    """
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def git_state(repo: str | Path = CHECKOUT) -> dict:
    """{"git_commit", "git_dirty"} of the checkout; commit "unknown" and dirty None outside git."""
    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                                  timeout=10, check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None
    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"git_commit": "unknown", "git_dirty": None}
    return {"git_commit": commit, "git_dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return tree


def _package_imports(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Dotted names of every inferlab module or package the tree imports (also inside functions)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import: resolve against this module's package
                parts = module.split(".") if is_package else module.split(".")[:-1]
                parts = parts[:len(parts) - (node.level - 1)]
                base = ".".join(filter(None, [*parts, base]))
            found.add(base)
            # `from inferlab.pkg import module` imports a module, not just a name
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name == PACKAGE or name.startswith(PACKAGE + ".")}


def _module_file(name: str, root: Path) -> Path | None:
    path = root.joinpath(*name.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _parse(path: Path, module: str) -> tuple[str, frozenset[str]]:
    """(hash of the docstring-free AST, inferlab modules it imports), cached by size and mtime."""
    stat = path.stat()
    key = (path.resolve(), stat.st_mtime_ns, stat.st_size)
    if key not in _ast_cache:
        tree = _strip_docstrings(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        digest = hashlib.sha256(ast.dump(tree).encode("utf-8")).hexdigest()
        imports = _package_imports(tree, module, path.name == "__init__.py")
        _ast_cache[key] = digest, frozenset(imports)
    _ast_cache_used.add(key)
    return _ast_cache[key]


def _parser_identity() -> str:
    """The parse cache is valid only for the parsing code that wrote it: this file."""
    return file_sha256(__file__)


def load_parse_cache(path: str | Path) -> None:
    """Adds the parses an earlier process saved, keyed like the memory cache (file, mtime, size).

    Every Snakemake start hashes every rule's code, and parsing every module is a large share of a dry
    run; with the cache it re-reads only the modules edited since the last start. A missing or
    damaged file, or one written by other parsing code, is ignored.
    """
    try:
        saved = json.loads(Path(path).read_text(encoding="utf-8"))
        if saved.get("parser") != _parser_identity():
            return
        for file, mtime_ns, size, digest, imports in saved["entries"]:
            _ast_cache.setdefault((Path(file), int(mtime_ns), int(size)), (str(digest), frozenset(imports)))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return


def save_parse_cache(path: str | Path) -> None:
    """Saves the parses this process used (so files since edited or removed drop out); best effort."""
    path = Path(path)
    entries = []
    for key in sorted(_ast_cache_used):
        digest, imports = _ast_cache[key]
        entries.append([str(key[0]), key[1], key[2], digest, sorted(imports)])
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps({"parser": _parser_identity(), "entries": entries}), encoding="utf-8")
        os.replace(partial, path)  # atomic: jobs that parse the Snakefile at once never read half a file
    except OSError:
        partial.unlink(missing_ok=True)


def import_closure(script: str | Path, root: str | Path) -> dict[str, str]:
    """{module name: AST hash} for the script's transitive inferlab imports, read from root/inferlab."""
    root = Path(root)
    _, pending = _parse(Path(script), "__main__")
    pending = set(pending)
    closure: dict[str, str] = {}
    while pending:
        name = pending.pop()
        # importing inferlab.a.b runs inferlab/__init__.py and inferlab/a/__init__.py first
        parents = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        pending |= parents - closure.keys()
        path = _module_file(name, root)
        if path is None or name in closure:
            continue  # a name imported from a module (from inferlab.x import y), not a module
        closure[name], imports = _parse(path, name)
        pending |= imports - closure.keys()
    return closure


def stack_versions() -> dict[str, str]:
    """Versions of the numeric stack, read from package metadata (nothing is imported)."""
    versions = {"python": platform.python_version()}
    for name in NUMERIC_STACK:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions


def code_identity(script: str | Path, root: str | Path, compute: bool) -> dict:
    """Everything that makes up a rule's code, in the form that is hashed."""
    script_hash, _ = _parse(Path(script), "__main__")
    identity = {"script": script_hash, "modules": import_closure(script, root)}
    if compute:
        identity["versions"] = stack_versions()
    return identity


def code_sha256(script: str | Path, root: str | Path, compute: bool) -> str:
    return canonical_sha256(code_identity(script, root, compute))


# --- the record each job writes into its outputs ---------------------------------------------

def job_lineage(rule: str, params: Mapping, inputs: Iterable[str]) -> dict:
    """Lineage of one job: its rule, code hash, settings (and their hash) and the sha256 of every input file.

    `params` are the rule's params: `code_sha256` (and other `code_*` entries) are code, the
    rest is the config subtree the rule uses.
    """
    params = dict(params)
    settings = {key: value for key, value in params.items() if not key.startswith("code_")}
    return {"rule": rule, "code_sha256": params.get("code_sha256"),
            "config_sha256": canonical_sha256(settings),
            # the values themselves, so a diff can name the key that moved, not only that the hash did
            "settings": json.loads(json.dumps(settings, ensure_ascii=False, default=str)),
            "inputs_sha256": {str(path): file_sha256(path) for path in inputs if Path(path).is_file()}}


def set_job_lineage(lineage: dict | None) -> None:
    """Remembers the running job's lineage so every table and checkpoint it writes records it."""
    global _job_lineage
    _job_lineage = lineage


def current_job_lineage() -> dict | None:
    return _job_lineage
