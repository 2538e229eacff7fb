"""scripts/mutation.py, the CI gate of the mutation run: which functions a change is held to, how a module's score
is counted, and the options that could turn the gate off."""

from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def mutation():
    spec = importlib.util.spec_from_file_location("mutation_script", REPO / "scripts" / "mutation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _lines_of(module: str, name: str, cls: str = "") -> set:
    """The line numbers of function ``name`` (a method of ``cls``) in ``module``."""
    tree = ast.parse((REPO / module).read_text())
    scope = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls) if cls else tree
    node = next(n for n in scope.body if isinstance(n, ast.FunctionDef) and n.name == name)
    return set(range(node.lineno, node.end_lineno + 1))


def test_touched_lines_map_to_mutmut_s_names_of_their_functions_and_methods(mutation):
    paths, manifest = "paddlex_npu/om/paths.py", "paddlex_npu/om/manifest.py"
    lines = sorted(_lines_of(paths, "check_model_path"))
    assert mutation.functions_at(paths, set(lines[:3])) == [("paddlex_npu.om.paths.x_check_model_path__mutmut_*", 3)]
    save = sorted(_lines_of(manifest, "save", "OMManifest"))
    assert mutation.functions_at(manifest, {save[1], 1}) == [
        ("paddlex_npu.om.manifest.x\u01c1OMManifest\u01c1save__mutmut_*", 1)  # line 1 is in no function
    ]


def test_ci_keeps_the_functions_with_the_most_changed_lines_and_names_the_rest(mutation, monkeypatch, capsys):
    paths, manifest = "paddlex_npu/om/paths.py", "paddlex_npu/om/manifest.py"
    check = sorted(_lines_of(paths, "check_model_path"))
    save = sorted(_lines_of(manifest, "save", "OMManifest"))
    load = sorted(_lines_of(manifest, "load"))
    touched = {paths: set(check[:2]), manifest: set(save[:1]) | set(load[:3])}
    monkeypatch.setattr(mutation, "changed_lines", lambda base: touched)
    targets = mutation.ci_targets("base", max_functions=2)
    assert targets == [
        (manifest, ["paddlex_npu.om.manifest.x_load__mutmut_*"]),
        (paths, ["paddlex_npu.om.paths.x_check_model_path__mutmut_*"]),
    ]
    assert "1 more touched functions not mutated" in capsys.readouterr().err
    assert len(sum((g for _, g in mutation.ci_targets("base", max_functions=12)), [])) == 3


def test_ci_runs_the_fixed_sample_when_no_gated_module_was_touched(mutation, monkeypatch):
    monkeypatch.setattr(mutation, "changed_lines", lambda base: {"paddlex_npu/serve/app.py": {1, 2}})
    assert mutation.ci_targets("base", max_functions=12) == [(m, None) for m in mutation.CI_SAMPLE]


def test_a_score_leaves_out_the_listed_equivalents_and_names_a_stale_one(mutation, monkeypatch, tmp_path):
    module = "paddlex_npu/om/paths.py"
    meta = tmp_path / "mutants" / f"{module}.meta"
    meta.parent.mkdir(parents=True)
    codes = {"a": 1, "b": 3, "c": 0, "d": 0, "e": 1, "f": None, "g": 34}  # killed, killed, survived x2, ...
    meta.write_text(json.dumps({"exit_code_by_key": codes}))
    monkeypatch.setattr(mutation, "equivalents", lambda: {"d": "same codec", "e": "listed, yet killed"})
    row = mutation.score(module, work=tmp_path)
    assert (row["mutants"], row["checked"], row["equivalent"], row["caught"]) == (7, 5, 2, 2)
    assert row["survived"] == ["c"] and row["stale_equivalents"] == ["e"]
    assert row["score"] == pytest.approx(100 * 2 / 3)


@pytest.mark.parametrize("value", ["0", "-1", "x"])
def test_max_functions_below_one_is_refused(mutation, value):
    with pytest.raises(SystemExit) as exit_:
        mutation.main(["--ci", "--max-functions", value])
    assert exit_.value.code == 2


def test_the_fixed_sample_is_a_gated_module(mutation):
    assert set(mutation.CI_SAMPLE) <= set(mutation.GATED)
