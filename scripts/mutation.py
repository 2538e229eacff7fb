#!/usr/bin/env python3
"""Mutation testing of the modules that decide what reaches the device (mutmut; the unit layer, or a module's venv).

    scripts/mutation.py --setup                 # add mutmut to .venv-unit (requirements/mutation.txt)
    scripts/mutation.py --setup paddlex_npu/serve/images.py  # and mutmut alone to its venv (ENVIRONMENTS)
    scripts/mutation.py                         # every module in MODULES (one mutmut run per environment)
    scripts/mutation.py paddlex_npu/om/paths.py # some of them
    scripts/mutation.py --ci                    # CI: the functions a change touched, within --budget seconds
    scripts/mutation.py --survivors MODULE      # the diffs of the surviving mutants of a module's last run

The modules of a run are mutated together in a scratch folder (``.mutation/run/``, ``.mutation/ci/`` for --ci:
mutmut copies the project into its ``mutants/`` there), with ``[tool.mutmut]`` of pyproject.toml (the exclusion
rules, written down there) plus ``only_mutate`` for them, and pytest on ``tests/unit`` (PaddleX-free) in
``--venv``. A module listed in :data:`ENVIRONMENTS` (one that needs PaddleX) runs instead in that environment (a
venv of the repository with mutmut added, ``--setup MODULE``; ``--venv-of NAME=PATH`` when it is elsewhere) on
that table's test files, in a scratch folder per environment (``.mutation/run-<venv>/``, ``.mutation/ci-<venv>/``).
The score of a module is caught / (mutants - equivalent), caught = killed + timeout; equivalent mutants are
listed, one line why each, in scripts/mutation-equivalents.txt. Prints one row per module and the total;
``--min-score`` (default 90) fails the run when a module is below it.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Set, Tuple

from paddlex_npu.cli.common import positive_int

try:
    import tomllib
except ImportError:  # Python < 3.11: mutmut 3 installs toml
    import toml as tomllib  # type: ignore[no-redef]

REPO = Path(__file__).resolve().parent.parent
VENV = REPO / ".venv-unit"  # the unit layer's environment, with mutmut added (--setup)
WORK = REPO / ".mutation"
EQUIVALENTS = REPO / "scripts" / "mutation-equivalents.txt"
# What decides what reaches the device, smallest first, then the pool. The runtimes' doubles (run/reference*.py,
# run/simulated.py) are left out: they stand in for the device, their own tests are the reference checks.
MODULES = [
    "paddlex_npu/run/tasks.py",
    "paddlex_npu/devices.py",
    "paddlex_npu/run/dtypes.py",
    "paddlex_npu/serve/options.py",
    "paddlex_npu/om/graph.py",
    "paddlex_npu/om/paths.py",
    "paddlex_npu/config.py",
    "paddlex_npu/om/package.py",
    "paddlex_npu/om/output_shapes.py",
    "paddlex_npu/run/device_ids.py",
    "paddlex_npu/run/session.py",
    "paddlex_npu/om/atc.py",
    "paddlex_npu/serve/images.py",
    "paddlex_npu/run/buffers.py",
    "paddlex_npu/run/shape_solver.py",
    "paddlex_npu/run/ais.py",
    "paddlex_npu/om/manifest.py",
    "paddlex_npu/run/gears.py",
    "paddlex_npu/run/runner.py",
    "paddlex_npu/executor/worker.py",  # the pool: what each input becomes, which worker runs, dies, is replaced
    "paddlex_npu/executor/pool.py",
]
CAUGHT = {1, 3, 36, -24, 24, 152, 255}  # mutmut's exit codes: killed (1, 3) and timeout
SURVIVED = {0, 5, 33}  # survived, no tests
# What the unit layer reads besides the package and its tests (the docs checks, the layer rules, ...).
ALSO_COPY = (
    "docs",
    "mkdocs.yml",
    "README.md",
    "requirements",
    "scripts",
    "setup.cfg",
    "examples",
    "benchmarks",
    "deploy",
    "patches",
    "CHANGELOG.md",
    ".github",
)
# The modules CI holds to the score (--ci): their tests (the unit layer alone, or ENVIRONMENTS' selection) were
# measured to catch >= 90% of their mutants, every module of MODULES since 2026-12-04 (docs/testing.md). A module
# added to MODULES goes in UNGATED until a full run measures it at the score.
# Every module is gated: the pool's last two (2026-12-06, full runs): worker.py 98.5%, pool.py 97.1%.
UNGATED: Set[str] = set()
GATED = [m for m in MODULES if m not in UNGATED]
CI_SAMPLE = ["paddlex_npu/om/paths.py"]  # CI with no listed module touched: a fixed small sample
# The modules the unit layer cannot measure: module -> (its environment, a venv relative to the repository, and
# the test files run against its mutants there, the narrowest fast ones that exercise it). Full runs, --ci and
# --report use them; the rest of MODULES runs in --venv on tests/unit.
ENVIRONMENTS: Dict[str, Tuple[str, List[str]]] = {
    # Pillow, pypdfium2 and PaddleX's serving helpers: the PaddleX 3.7 environment (not the server processes of
    # tests/serve/test_serve*.py or the Triton and load tests: minutes a mutant)
    "paddlex_npu/serve/images.py": (".venv", ["tests/serve/test_images.py"]),
}
VENV_OF: Dict[str, Path] = {}  # an ENVIRONMENTS venv -> where it is, when not in the repository (--venv-of)


def mutmut_config() -> dict:
    with open(REPO / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["mutmut"]


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    return "[" + ", ".join(toml_value(v) for v in value) + "]"


def importing_tests(modules: List[str]) -> List[str]:
    """The unit test files that import one of ``modules`` by name (CI's narrower, faster selection)."""
    patterns = []
    for module in modules:
        package, _, name = module[:-3].replace("/", ".").rpartition(".")
        patterns.append(
            re.compile(rf"\b{re.escape(package)}\.{name}\b|from {re.escape(package)} import [^\n]*\b{name}\b")
        )
    return sorted(
        str(p.relative_to(REPO))
        for p in (REPO / "tests" / "unit").rglob("test_*.py")
        if any(pat.search(p.read_text()) for pat in patterns)
    )


def prepare(work: Path, modules: List[str], fresh: bool, tests: Optional[List[str]] = None) -> Path:
    """The scratch folder ``work``: links to the package and the tests, and the mutmut config for ``modules``
    (``tests``: the test selection, default the config's)."""
    if fresh and work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    for name in ("paddlex_npu", "tests", *ALSO_COPY):
        link = work / name
        if not link.is_symlink() and (REPO / name).exists():
            link.symlink_to(REPO / name)
    config = dict(mutmut_config(), only_mutate=list(modules), also_copy=list(ALSO_COPY))
    if tests:
        config["pytest_add_cli_args_test_selection"] = tests
    with open(REPO / "pyproject.toml", "rb") as f:
        pytest_ini = tomllib.load(f)["tool"]["pytest"]["ini_options"]
    text = "[tool.mutmut]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in config.items())
    text += "\n[tool.pytest.ini_options]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in pytest_ini.items())
    (work / "pyproject.toml").write_text(text)
    return work


def venv_of(module: str) -> Path:
    """The environment ``module``'s mutants are tested in: its :data:`ENVIRONMENTS` venv, else ``--venv``."""
    if module not in ENVIRONMENTS:
        return VENV
    name = ENVIRONMENTS[module][0]
    return VENV_OF.get(name, REPO / name)


def mutmut(venv: Path) -> List[str]:
    """The mutmut command of ``venv`` (its console script's code, so that a mutmut on PYTHONPATH serves too)."""
    code = "import sys; from mutmut.__main__ import cli; sys.argv[0] = 'mutmut'; sys.exit(cli())"
    return [str(venv / "bin" / "python"), "-c", code]


def groups(targets: List[Tuple[str, Optional[List[str]]]], label: str) -> List[Tuple[Path, Path, list]]:
    """(scratch folder, venv, targets) per environment: the unit layer's in ``.mutation/<label>``, each of
    :data:`ENVIRONMENTS`' in ``.mutation/<label>-<venv>``."""
    out: Dict[Optional[str], Tuple[Path, Path, list]] = {}
    for module, globs in targets:
        name = ENVIRONMENTS[module][0] if module in ENVIRONMENTS else None
        work = WORK / (label if name is None else f"{label}-{name.strip('.').replace('/', '-')}")
        out.setdefault(name, (work, venv_of(module), []))[2].append((module, globs))
    return list(out.values())


def test_selection(modules: List[str], ci: bool) -> Optional[List[str]]:
    """The test files run against ``modules`` (one environment's): their :data:`ENVIRONMENTS` files, else in CI
    the unit tests importing them, else the config's (``tests/unit``)."""
    listed = sorted({t for m in modules if m in ENVIRONMENTS for t in ENVIRONMENTS[m][1]})
    return listed or (importing_tests(modules) if ci else None)


def run_modules(
    work: Path,
    modules: List[str],
    names: Optional[List[str]],
    jobs: int,
    timeout: float,
    fresh: bool,
    tests: Optional[List[str]] = None,
    venv: Optional[Path] = None,
) -> bool:
    """mutmut on ``modules`` at once, one test-coverage pass for all (``names``: only those mutant globs), in
    ``venv`` (default ``--venv``); False when it ran out of time."""
    work = prepare(work, modules, fresh, tests)
    # made before Python starts: a PYTHONPATH entry that does not exist yet is cached as absent for good
    (work / "mutants").mkdir(exist_ok=True)
    # the mutants first; a PYTHONPATH given to this script after them (e.g. where mutmut is, if not in the venv)
    path = os.pathsep.join(p for p in (str(work / "mutants"), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, PYTHONPATH=path, PYTHONDONTWRITEBYTECODE="1")
    env.pop("PADDLEX_NPU_RUNTIME", None)
    cmd = [*mutmut(venv or VENV), "run", "--max-children", str(jobs), *(names or [])]
    with open(work / "mutmut.log", "w") as log:
        try:
            subprocess.run(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return False
    if "failed to collect stats" in (work / "mutmut.log").read_text(errors="replace"):
        # the unmutated tests failed in the scratch copy: no mutant was tried, so no score means anything
        raise SystemExit(
            f"mutation: the tests fail before any mutant runs (a file missing from ALSO_COPY?): {work}/mutmut.log"
        )
    return True


def meta_of(module: str, work: Optional[Path] = None) -> Optional[Path]:
    """The result file of ``module`` in ``work``, else the newest among the scratch folders."""
    found = sorted((work or WORK).glob(f"{'' if work else '*/'}mutants/{module}.meta"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def exit_codes(module: str, work: Optional[Path] = None) -> Dict[str, Optional[int]]:
    meta = meta_of(module, work)
    return json.loads(meta.read_text())["exit_code_by_key"] if meta else {}


def equivalents() -> Dict[str, str]:
    """Mutant name -> why it changes no behaviour (scripts/mutation-equivalents.txt)."""
    out = {}
    for line in EQUIVALENTS.read_text().splitlines() if EQUIVALENTS.exists() else []:
        if line.strip() and not line.startswith("#"):
            name, _, why = line.partition(" ")
            out[name] = why.strip()
    return out


def score(module: str, only: Optional[Set[str]] = None, work: Optional[Path] = None) -> dict:
    codes = {k: v for k, v in exit_codes(module, work).items() if only is None or k in only}
    equiv = equivalents()
    checked = {k: v for k, v in codes.items() if v is not None and v != 34}
    eq = [k for k in checked if k in equiv]
    caught = [k for k, v in checked.items() if v in CAUGHT and k not in equiv]
    survived = sorted(k for k, v in checked.items() if v not in CAUGHT and k not in equiv)
    stale = [k for k in eq if checked[k] in CAUGHT]  # listed as equivalent, yet a test kills it: not equivalent
    counted = len(checked) - len(eq)
    return {
        "module": module,
        "mutants": len(codes),
        "checked": len(checked),
        "equivalent": len(eq),
        "caught": len(caught),
        "survived": survived,
        "stale_equivalents": stale,
        "score": 100.0 * len(caught) / counted if counted else 100.0,
    }


def print_table(rows: List[dict], min_score: float) -> bool:
    ok = True
    print(f"{'module':40} {'mutants':>7} {'equiv':>5} {'caught':>6} {'survived':>8} {'score':>7}")
    for r in rows:
        below = r["score"] < min_score or r["checked"] < r["mutants"]
        ok &= not below
        mark = "  BELOW" if r["score"] < min_score else "  (incomplete)" if r["checked"] < r["mutants"] else ""
        print(
            f"{r['module']:40} {r['mutants']:7} {r['equivalent']:5} {r['caught']:6} {len(r['survived']):8} "
            f"{r['score']:6.1f}%{mark}"
        )
        for k in r["stale_equivalents"]:
            print(f"  listed as equivalent but killed: {k} (drop it from {EQUIVALENTS.name})")
    total_counted = sum(r["checked"] - r["equivalent"] for r in rows)
    total_caught = sum(r["caught"] for r in rows)
    total = 100.0 * total_caught / total_counted if total_counted else 100.0
    print(
        f"{'all':40} {sum(r['mutants'] for r in rows):7} {sum(r['equivalent'] for r in rows):5} {total_caught:6} "
        f"{sum(len(r['survived']) for r in rows):8} {total:6.1f}%"
    )
    return ok


# ---- CI: the functions a change touched ------------------------------------------------------------------------
def changed_lines(base: str) -> Dict[str, Set[int]]:
    """Per listed module, the lines (new numbering) a change against ``base`` added or altered."""
    diff = subprocess.run(
        ["git", "diff", "-U0", base, "--", *MODULES], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    out: Dict[str, Set[int]] = {}
    current = None
    for line in diff.splitlines():
        if line.startswith("+++ "):
            current = line[6:] if line.startswith("+++ b/") else None
        elif line.startswith("@@") and current:
            new = line.split()[2].lstrip("+").split(",")
            start, count = int(new[0]), int(new[1]) if len(new) > 1 else 1
            out.setdefault(current, set()).update(range(start, start + max(count, 1)))
    return out


def functions_at(module: str, lines: Set[int]) -> List[Tuple[str, int]]:
    """mutmut's mutant-name globs of the functions (and methods) holding ``lines``, with how many of the lines each
    holds."""
    tree = ast.parse((REPO / module).read_text())
    globs = []

    def visit(node: ast.AST, cls: Optional[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, child.name)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                held = lines & set(range(child.lineno, (child.end_lineno or child.lineno) + 1))
                if held:
                    mangled = f"x\u01c1{cls}\u01c1{child.name}" if cls else f"x_{child.name}"
                    globs.append((f"{module[:-3].replace('/', '.')}.{mangled}__mutmut_*", len(held)))

    visit(tree, None)
    return globs


def ci_base() -> str:
    for ref in ("origin/main", "main"):
        found = subprocess.run(["git", "merge-base", "HEAD", ref], cwd=REPO, capture_output=True, text=True)
        base = found.stdout.strip()
        if found.returncode == 0 and base and base != head():
            return base
    return "HEAD~1"


def head() -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()


def ci_targets(base: str, max_functions: int, quiet: bool = False) -> List[Tuple[str, Optional[List[str]]]]:
    """(module, mutant globs) of the :data:`GATED` modules a change touched; the fixed sample, whole, when it
    touched none. At most ``max_functions`` functions, those with the most changed lines (a large change would not
    fit CI's budget); the rest are named on stderr."""
    touched = [
        (module, glob, held)
        for module, lines in sorted(changed_lines(base).items())
        if module in GATED
        for glob, held in functions_at(module, lines)
    ]
    if not touched:
        return [(m, None) for m in CI_SAMPLE]
    kept = sorted(touched, key=lambda t: -t[2])[:max_functions]  # stable: ties keep the file order
    left = [glob for _, glob, _ in touched if all(glob != k[1] for k in kept)]
    if left and not quiet:
        print(
            f"{len(left)} more touched functions not mutated in this run (over --max-functions {max_functions}); "
            f"a full run measures them: {', '.join(left)}",
            file=sys.stderr,
        )
    targets: Dict[str, List[str]] = {}
    for module, glob, _ in touched:
        if any(glob == k[1] for k in kept):
            targets.setdefault(module, []).append(glob)
    return list(targets.items())


def matching(module: str, globs: Optional[Iterable[str]], work: Optional[Path] = None) -> Optional[Set[str]]:
    if globs is None:
        return None
    return {k for k in exit_codes(module, work) if any(fnmatch.fnmatchcase(k, g) for g in globs)}


def other_venvs(modules: Iterable[str]) -> List[Path]:
    """The :data:`ENVIRONMENTS` venvs that ``modules`` are tested in (besides ``--venv``)."""
    return sorted({venv_of(m) for m in modules if m in ENVIRONMENTS})


def setup(modules: Iterable[str]) -> None:
    """mutmut with the unit layer's requirements into ``--venv``; mutmut alone into the :data:`ENVIRONMENTS` venvs
    of ``modules``, named ones only (they have their tests' requirements; the unit layer's would replace some of
    them, e.g. .venv's OpenCV)."""
    if not (VENV / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    pip = [str(VENV / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "-r", str(REPO / "requirements" / "mutation.txt")], check=True)
    for venv in other_venvs(modules):
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, "-r", str(REPO / "requirements" / "mutmut.txt")], check=True)


def survivors(module: str) -> None:
    meta = meta_of(module)
    work = meta.parents[len(Path(module).parts)] if meta else WORK
    for name in score(module)["survived"]:
        subprocess.run([*mutmut(venv_of(module)), "show", name], cwd=work, check=False)


def main(argv: Optional[List[str]] = None) -> int:
    global VENV
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("modules", nargs="*", help=f"modules to mutate (default: all {len(MODULES)} of MODULES)")
    p.add_argument("--ci", action="store_true", help="the functions a change touched (vs the merge base)")
    p.add_argument("--base", help="--ci: the commit to compare with (default: merge-base with origin/main)")
    p.add_argument("--budget", type=float, default=210.0, help="--ci: seconds for the whole run (default 210)")
    p.add_argument(
        "--max-functions",
        type=positive_int,  # 0 would mutate nothing and pass: the gate off without a word
        default=12,
        help="--ci: mutate at most this many touched functions (default 12)",
    )
    p.add_argument("--min-score", type=float, default=90.0, help="fail under this score per module (default 90)")
    p.add_argument("--jobs", type=int, default=2, help="mutants tested at once (default 2)")
    p.add_argument("--timeout", type=float, default=3 * 3600.0, help="seconds for the run (default 3 hours)")
    p.add_argument("--keep", action="store_true", help="reuse the last run's results (mutmut's cache)")
    p.add_argument("--report", action="store_true", help="print the last runs' scores, run nothing")
    p.add_argument("--survivors", metavar="MODULE", help="show the surviving mutants' diffs of MODULE")
    p.add_argument("--setup", action="store_true", help="install mutmut into --venv (and the named modules' venvs)")
    p.add_argument("--venv", type=Path, default=VENV, help=f"mutmut's environment (default {VENV})")
    p.add_argument(
        "--venv-of",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="where an ENVIRONMENTS venv is, when not in the repository (e.g. .venv=../main/.venv)",
    )
    p.add_argument("--other-venvs", action="store_true", help="print the ENVIRONMENTS venvs the run uses, run nothing")
    args = p.parse_args(argv)
    VENV = args.venv.absolute()  # mutmut runs in a scratch folder: a relative --venv would not be found there
    for entry in args.venv_of:
        name, sep, path = entry.partition("=")
        if not sep or name not in {v for v, _ in ENVIRONMENTS.values()}:
            p.error(f"--venv-of {entry}: give NAME=PATH, NAME one of ENVIRONMENTS' venvs")
        VENV_OF[name] = Path(path).absolute()
    if args.setup:
        setup(args.modules)
        return 0
    if args.survivors:
        survivors(args.survivors)
        return 0
    if args.ci:
        targets = ci_targets(args.base or ci_base(), args.max_functions, quiet=args.other_venvs)
    else:
        targets = [(m, None) for m in (args.modules or MODULES)]
    if args.other_venvs:
        for venv in other_venvs(m for m, _ in targets):
            print(venv)
        return 0
    start, complete = time.monotonic(), True
    where: Dict[str, Optional[Path]] = {m: None for m, _ in targets}  # --report: the newest run of each
    timeout = args.budget if args.ci else args.timeout
    for work, venv, group in [] if args.report else groups(targets, "ci" if args.ci else "run"):
        if not (venv / "bin" / "python").exists():
            print(f"no environment at {venv}: make it (scripts/setup.sh), or --venv-of NAME=PATH", file=sys.stderr)
            return 2
        modules = [m for m, _ in group]
        globs = None if all(g is None for _, g in group) else [x for _, g in group for x in g or []]
        left = timeout - (time.monotonic() - start)  # one budget for all environments
        tests = test_selection(modules, args.ci)
        if left <= 0 or not run_modules(work, modules, globs, args.jobs, left, not args.keep, tests, venv):
            complete = False
            print(f"out of time after {timeout:.0f} s ({', '.join(modules)})", file=sys.stderr)
        where.update({m: work for m in modules})
    rows = [score(m, matching(m, g, where[m]), where[m]) for m, g in targets]
    ok = print_table(rows, args.min_score)
    print(f"{time.monotonic() - start:.0f} s")
    if args.ci and not complete:
        print(f"the run did not finish within {args.budget:.0f} s", file=sys.stderr)
    return 0 if ok and complete else 1


if __name__ == "__main__":
    sys.exit(main())
