"""The package's layers: each module imports only from its own layer or those below it, PaddleX only in the
``paddlex`` layer, and the runtime layers import without PaddleX."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "paddlex_npu"

# Layer of each top-level part, lowest first; a module may import its own layer and lower ones.
# A folder is a job: kernels (pure functions over bytes and arrays, no PaddleX), build (convert), samples (the
# bundled models), reports, serve, triton, deploy (k8s), perf, the cli.
ORDER = [
    "base",
    "kernels",
    "om",
    "run",
    "executor",
    "paddlex",
    "build",
    "samples",
    "reports",
    "serve",
    "triton",
    "deploy",
    "perf",
    "ray",
    "cli",
]
BASE = {"errors", "config", "log", "version", "deps", "envs", "devices", "runtimes"}
# Third-party packages a layer may not import (PaddleX and Paddle stay in the adapters and tools that need them).
# PaddleOCR is built on PaddleX: only the paddlex layer touches it. serve, ray and cli reach both through the one
# boundary module paddlex_npu/paddlex/serving.py.
FORBIDDEN = {
    "base": {"paddlex", "paddle", "paddleocr"},
    "kernels": {"paddlex", "paddle", "paddleocr", "onnxruntime", "onnx"},
    "om": {"paddlex", "paddle", "onnxruntime", "paddleocr"},
    "run": {"paddlex", "paddle", "paddleocr"},
    "executor": {"paddlex", "paddle", "paddleocr"},
    "build": {"paddlex", "paddleocr"},
    "samples": {"paddlex", "paddleocr"},
    "reports": {"paddlex", "paddleocr"},
    "deploy": {"paddlex", "paddle", "paddleocr"},
    "perf": {"paddlex", "paddleocr"},
    "serve": {"paddlex", "paddleocr"},
    "triton": {"paddlex", "paddleocr"},
    "ray": {"paddlex", "paddleocr"},
    "cli": {"paddlex", "paddleocr"},
}


def layer_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "root"
    head = parts[1]
    return "base" if head in BASE else head


def modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        name = ".".join(rel.parts)
        yield (name[: -len(".__init__")] if name.endswith(".__init__") else name), path


def imports(name: str, path: Path):
    """(imported module, is it inside paddlex_npu) for every import statement, including function-level ones."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
                if node.module is None:  # from . import x
                    for alias in node.names:
                        yield f"{target}.{alias.name}"
                    continue
                yield target
            else:
                yield node.module


@pytest.mark.parametrize("name, path", list(modules()), ids=[n for n, _ in modules()])
def test_no_module_imports_upward_or_paddlex_outside_its_layer(name, path):
    own = layer_of(name)
    if own == "root":  # paddlex_npu/__init__.py: the public surface, allowed to reach the patcher
        return
    for target in imports(name, path):
        top = target.split(".")[0]
        if top == "paddlex_npu":
            other = layer_of(target)
            if other == "root":
                pytest.fail(f"{name} imports the package root ({target}); import the module that defines it")
            if other in ORDER and ORDER.index(other) > ORDER.index(own):
                pytest.fail(f"{name} ({own} layer) imports {target} ({other} layer, above it)")
        elif top in FORBIDDEN.get(own, ()):
            pytest.fail(f"{name} ({own} layer) imports {top}, which only the paddlex layer may import")


# a string that is a module's dotted path (``a.b.c``, ``a.b:name``) of paddlex-npu or of the packages FORBIDDEN names
DOTTED = re.compile(r"^(?P<top>[a-z_]\w*)(\.[A-Za-z_]\w*)+(:[A-Za-z_]\w*)?$|^(?P<top2>[a-z_]\w*):[A-Za-z_]\w*$")


def dotted_strings(source: str) -> list:
    """(line, dotted path) of each string that names a module (``"pkg.mod"``, ``"pkg.mod:name"``): an import by
    name (a hook, a preload, ``sys.modules.get``). Docstrings and a command's ``-m`` module (a program run, not
    imported) are not."""
    tree = ast.parse(source)
    skip = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
        ):
            skip.add(id(body[0].value))  # a docstring
        if isinstance(node, (ast.List, ast.Tuple)):
            skip |= {id(b) for a, b in zip(node.elts, node.elts[1:]) if isinstance(a, ast.Constant) and a.value == "-m"}
    return sorted(
        (n.lineno, n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip and DOTTED.match(n.value)
    )


def test_the_string_scan_finds_a_hook_and_a_preload_but_not_a_command_or_a_docstring():
    snippet = (
        'def f():\n    """paddlex_npu.paddlex.pipelines: a docstring."""\n'
        'FACTORY = "paddlex_npu.paddlex.pipelines:create_on_device"\n'
        'PRELOAD = ["paddlex.inference.serving.infra.utils", "numpy"]\n'
        'argv = [sys.executable, "-m", "paddlex_npu.cli", "serve"]\n'
        'text = "see docs/architecture.md. Then run it."\n'
    )
    assert dotted_strings(snippet) == [
        (3, "paddlex_npu.paddlex.pipelines:create_on_device"),
        (4, "paddlex.inference.serving.infra.utils"),
    ]


@pytest.mark.parametrize("name, path", list(modules()), ids=[n for n, _ in modules()])
def test_no_string_names_a_module_of_a_layer_above_or_paddlex_outside_its_layer(name, path):
    """The layering rule holds for imports by name too: a hook or preload given as a dotted string names only a
    module of its own layer or one below, and PaddleX (or Paddle, PaddleOCR) only in the paddlex layer."""
    own = layer_of(name)
    if own == "root":
        return
    for line, target in dotted_strings(path.read_text(encoding="utf-8")):
        module = target.split(":")[0]
        top = module.split(".")[0]
        if top == "paddlex_npu" and "." in module:
            other = layer_of(module)
            if other in ORDER and ORDER.index(other) > ORDER.index(own):
                pytest.fail(
                    f"{name}:{line} ({own} layer) names {target!r} ({other} layer, above it): take it from the caller"
                )
        elif top in FORBIDDEN.get(own, ()):
            pytest.fail(f"{name}:{line} ({own} layer) names {target!r}: only the paddlex layer names {top}'s modules")


def test_every_folder_is_a_layer():
    """A new folder takes its place in ORDER; there is no grab-bag (``tools``) and no test-only code (``testing``)
    in the package: the tests' own helpers live under tests/."""
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert folders == set(ORDER) - {"base"}, folders ^ (set(ORDER) - {"base"})


def test_runtime_layers_import_without_paddlex():
    """A PaddleX-less interpreter (imports of paddlex/paddle blocked) loads the om and run layers and the
    package itself, and ``install()`` then says what to install."""
    code = """
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split('.')[0] in ('paddlex', 'paddle'):
            raise ModuleNotFoundError(name)
sys.meta_path.insert(0, Block())
import importlib.util
importlib.util.find_spec = (lambda f: lambda n, *a: None if n.split('.')[0] in ('paddlex', 'paddle') else f(n, *a))(
    importlib.util.find_spec)
import paddlex_npu
from paddlex_npu.kernels import png_read
from paddlex_npu.om import atc, manifest, package
from paddlex_npu.run import buffers, dtypes, gears, reference, reference_om, runner, session, simulated
from paddlex_npu.build import planner
from paddlex_npu import executor
assert not paddlex_npu.is_installed()
assert 'paddlex' not in sys.modules and 'paddle' not in sys.modules
print('ok')
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


def test_import_loads_no_heavy_dependency():
    """``import paddlex_npu`` (the first line of every script that uses the route) loads neither pydantic nor
    ONNX Runtime nor importlib.metadata: they come with the layer that needs them."""
    code = (
        "import sys, paddlex_npu\n"
        "heavy = [m for m in ('pydantic', 'onnxruntime', 'onnx', 'importlib.metadata', 'numpy') if m in sys.modules]\n"
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", (out.stdout, out.stderr[-2000:])


def test_a_missing_optional_package_names_the_feature_and_the_pip_command():
    """convert, inspect and the reference runtime import onnx/onnxruntime when used; without them the error says
    which feature needs which package and the pip command (not an ImportError traceback)."""
    code = """
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split('.')[0] in ('onnx', 'onnxruntime'):
            raise ModuleNotFoundError(name)
sys.meta_path.insert(0, Block())
from paddlex_npu.errors import ConfigError, RuntimeUnavailableError
from paddlex_npu.om.graph import data_dependent_outputs
from paddlex_npu.run.reference_om import ReferenceOM
calls = [(lambda: data_dependent_outputs('m.onnx'), ConfigError),
         (lambda: ReferenceOM('m.onnx'), RuntimeUnavailableError)]
for call, error in calls:
    try:
        call()
    except error as exc:
        print(exc)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    lines = out.stdout.strip().splitlines()
    assert out.returncode == 0 and len(lines) == 2, (out.stdout, out.stderr[-2000:])
    assert "needs the Python package onnx, which is not installed here: pip install onnx" in lines[0]
    assert "the CPU reference runtime needs the Python package onnxruntime" in lines[1]
    assert "pip install 'paddlex-npu[reference]'" in lines[1]


def test_the_architecture_page_names_every_module():
    section = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8").split("## The modules", 1)[1]
    missing = [p.name for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" and p.name not in section]
    assert not missing, f"docs/architecture.md 'The modules' does not name {missing}"


def test_every_error_class_is_in_errors_py():
    """Public exception classes live in paddlex_npu/errors.py (private control-flow ones, ``_Name``, may stay)."""
    strays = []
    for name, path in modules():
        if name == "paddlex_npu.errors":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
                if any(b.endswith(("Error", "Exception")) for b in bases):
                    strays.append(f"{name}.{node.name}")
    # Also one of PaddleX's own exception classes, which errors.py (no PaddleX) cannot import.
    strays = [s for s in strays if s != "paddlex_npu.paddlex.paddlex_34.UnknownModelError"]
    assert not strays, f"move these to paddlex_npu/errors.py: {strays}"


# ---- one house: every status from the reply table, every reach into PaddleX's serving app through the adapter ----
# HTTP statuses (and nginx's 499, client closed): an int literal of one of these values is a status.
STATUSES = {int(s) for s in __import__("http").HTTPStatus} | {499}
# the layers that answer requests; their statuses come from errors.REPLIES
ANSWERING = ("serve", "triton", "ray", "deploy")
NOT_STATUS_CALLS = {"_warmup_png"}  # a call whose numeric arguments are sizes: the Triton warm-up image (200 x 48)
# PaddleX's serving internals: attributes only paddlex/serving.py (the adapter) may reach.
INTERNAL_ATTRS = {"dependant", "lifespan_context", "_to_json"}


def status_literals(source: str) -> list:
    """(line, value) of each int literal in ``source`` that is an HTTP status."""
    tree = ast.parse(source)
    exempt = {  # a size: a slice's bound, an argument of a call that takes sizes
        id(child)
        for node in ast.walk(tree)
        if isinstance(node, ast.Slice)
        or (isinstance(node, ast.Call) and getattr(node.func, "id", None) in NOT_STATUS_CALLS)
        for child in (node.args if isinstance(node, ast.Call) else (node.lower, node.upper, node.step))
    }
    return sorted(
        (n.lineno, n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and type(n.value) is int and n.value in STATUSES and id(n) not in exempt
    )


def paddlex_serving_reaches(source: str) -> list:
    """(line, reach) of each attribute of PaddleX's serving internals: ``dependant`` (``.call``), the router's
    ``lifespan_context``, a result's ``_to_json``, the app's ``state.context``, its ``ctx.pipeline``."""
    found = []
    for n in ast.walk(ast.parse(source)):
        if not isinstance(n, ast.Attribute):
            continue
        owner = n.value.attr if isinstance(n.value, ast.Attribute) else getattr(n.value, "id", "")
        if (
            n.attr in INTERNAL_ATTRS
            or (n.attr == "context" and owner == "state")
            or (n.attr == "pipeline" and owner in ("ctx", "context"))
        ):
            found.append((n.lineno, f"{owner}.{n.attr}"))
    return sorted(found)


def test_the_scans_catch_a_status_literal_and_a_reach_into_paddlex():
    snippet = (
        "raise HTTPException(status_code=422, detail='no')\n"
        "ok = status < 500\n"
        "route.dependant.call = wrapped\n"
        "app.router.lifespan_context = mine\n"
        "ctx = app.state.context\n"
        "ctx.pipeline = ours\n"
        "same = type(result)._to_json is to_json\n"
        "png = _warmup_png(200, 48)\n"
        "head = body[:300]\n"
    )
    assert status_literals(snippet) == [(1, 422), (2, 500)]
    reaches = [r for _, r in paddlex_serving_reaches(snippet)]
    expected = ["route.dependant", "router.lifespan_context", "state.context", "ctx.pipeline", "._to_json"]
    assert reaches == expected  # ``type(result)._to_json``: an owner that is a call, named by nothing


def test_statuses_come_from_the_reply_table_and_paddlex_serving_from_its_adapter():
    """0 HTTP status literals in the layers that answer requests (each answer's status is a row of
    ``errors.REPLIES``, chosen by ``serve.replies.answer``); 0 reaches into PaddleX's serving app outside
    ``paddlex/`` (its adapter, ``paddlex/serving.py``)."""
    statuses, reaches = [], []
    for name, path in modules():
        source = path.read_text(encoding="utf-8")
        where = path.relative_to(PACKAGE)
        if layer_of(name) in ANSWERING:
            statuses += [f"{where}:{line}: {value}" for line, value in status_literals(source)]
        if layer_of(name) != "paddlex":
            reaches += [f"{where}:{line}: {what}" for line, what in paddlex_serving_reaches(source)]
    assert not statuses, f"status literals outside errors.REPLIES (raise a categorised error instead): {statuses}"
    assert not reaches, f"reaches into PaddleX's serving app outside paddlex/serving.py: {reaches}"


def import_graph() -> dict:
    """Module -> the package's modules it imports (every import, function-level ones included)."""
    names = {n for n, _ in modules()}
    graph: dict = {}
    for name, path in modules():
        targets = set()
        for target in imports(name, path):
            while target and target not in names and "." in target:  # `from .x import name` names x
                target = target.rsplit(".", 1)[0]
            if target in names and target not in (name, "paddlex_npu"):
                targets.add(target)
        graph[name] = targets
    return graph


def circles(graph: dict) -> list:
    """The import loops of ``graph``: one list of modules per loop found by a depth-first walk."""
    found, done, path = [], set(), []

    def walk(node: str) -> None:
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt in path:
                found.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in done:
                walk(nxt)
        path.pop()
        done.add(node)

    for node in sorted(graph):
        if node not in done:
            walk(node)
    return found


def test_the_circle_finder_finds_a_planted_loop():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles():
    """No two modules import each other, directly or around a loop, at module or function level: a lazy import
    that closes a loop hides a layering mistake rather than fixing it."""
    loops = circles(import_graph())
    assert not loops, "\n".join(" -> ".join(loop) for loop in loops)


def imported_names(name: str, path: Path):
    """What each import statement of a module reaches, function-level ones included: the module, and for ``from
    X import y`` also ``X.y`` (``from ..run import simulated`` reaches ``paddlex_npu.run.simulated``)."""
    yield from imports(name, path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join(base + [node.module])
            yield from (f"{module}.{alias.name}" for alias in node.names)


def test_the_executor_imports_neither_paddlex_nor_the_simulator():
    """The pool knows nothing of PaddleX or the simulator: no module of ``executor`` imports PaddleX, paddlex-npu's
    PaddleX layer or the simulated device, at any level (function-level imports included), nor names one in a
    string (a hook's ``"module:name"``); its workers reach them through the factory and meter their caller gives."""
    banned = ("paddlex", "paddle", "paddleocr", "paddlex_npu.paddlex", "paddlex_npu.run.simulated")
    found = [
        f"{name} {how} {target}"
        for name, path in modules()
        if layer_of(name) == "executor"
        for how, targets in (
            ("imports", imported_names(name, path)),
            ("names", [s.split(":")[0] for _, s in dotted_strings(path.read_text(encoding="utf-8"))]),
        )
        for target in targets
        if any(target == b or target.startswith(b + ".") for b in banned)
    ]
    assert not found, found
    assert any(layer_of(name) == "executor" for name, _ in modules())  # the check saw the layer


# ---- one walker of a pipeline config: paddlex/pipelines.py's sub_modules ----
CONFIG_KEYS = {"SubModules", "SubPipelines", "model_dir", "MODEL_KEY"}
WALKER = "paddlex_npu.paddlex.pipelines"
# walkers left to switch, each with its reason
WALKERS_LEFT = {"paddlex_npu.triton.repo": "issue 53 item 3: triton/ was being edited by another change"}


def config_walkers(source: str) -> list:
    """(line, what) of each walk of a pipeline config: a loop over a ``SubModules`` / ``SubPipelines`` mapping, or a
    function that recurses over a dict's items or values and names a config key (``model_dir``, ``SubModules``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.For, ast.AsyncFor)):
            iters = [node.iter]
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            iters = [g.iter for g in node.generators]
        else:
            iters = []
        if any(isinstance(c, ast.Constant) and c.value in CONFIG_KEYS for it in iters for c in ast.walk(it)):
            found.append((node.lineno, "a loop over a config's SubModules or SubPipelines"))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inner = list(ast.walk(node))
            recurses = any(isinstance(c, ast.Call) and getattr(c.func, "id", None) == node.name for c in inner)
            over_dict = any(isinstance(c, ast.Attribute) and c.attr in ("items", "values") for c in inner)
            names_key = any(
                (isinstance(c, ast.Constant) and c.value in CONFIG_KEYS)
                or (isinstance(c, ast.Name) and c.id in CONFIG_KEYS)
                for c in inner
            )
            if recurses and over_dict and names_key:
                found.append((node.lineno, f"{node.name}() recurses over a config"))
    return sorted(found)


def test_the_walker_scan_catches_a_loop_and_a_recursion():
    snippet = (
        "def first(config, name):\n"
        "    for sub in (config.get('SubModules') or {}).values():\n"
        "        if sub.get('module_name') == name:\n"
        "            return sub\n"
        "def dirs(node):\n"
        "    found = [node['model_dir']] if 'model_dir' in node else []\n"
        "    for value in node.values():\n"
        "        found += dirs(value) if isinstance(value, dict) else []\n"
        "    return found\n"
        "def portable(value):\n"
        "    return {k: portable(v) for k, v in value.items()}\n"  # a result, not a config: no config key
    )
    assert config_walkers(snippet) == [
        (2, "a loop over a config's SubModules or SubPipelines"),
        (5, "dirs() recurses over a config"),
    ]


def test_one_walker_of_pipeline_configs():
    """Every walk of a pipeline config's SubModules (SubPipelines recursed) is ``paddlex/pipelines.py``'s
    ``sub_modules``: the other layers take (dotted path, sub-config) from it."""
    strays = [
        f"{path.relative_to(PACKAGE)}:{line}: {what}"
        for name, path in modules()
        if name != WALKER and name not in WALKERS_LEFT
        for line, what in config_walkers(path.read_text(encoding="utf-8"))
    ]
    assert not strays, f"walk the config with paddlex_npu.paddlex.pipelines.sub_modules: {strays}"
    assert config_walkers(PACKAGE.joinpath("paddlex", "pipelines.py").read_text(encoding="utf-8"))  # it saw the walker
