"""One table of environment variables (paddlex_npu/envs.py): the docs page is its table, and no other module
reads a PADDLEX_NPU_* variable itself."""

from __future__ import annotations

import re
from pathlib import Path

from paddlex_npu import envs

ROOT = Path(__file__).resolve().parents[2]
NOT_VARIABLES = {"PADDLEX_NPU_FORK"}  # an attribute the fork patch sets on PaddleX's module, not a variable


def test_the_docs_page_is_the_table_of_envs_py():
    page = (ROOT / "docs" / "environment.md").read_text(encoding="utf-8")
    table = page.split("<!-- table: generated from paddlex_npu/envs.py -->\n", 1)[1].split("\n<!-- end of table", 1)[0]
    assert table == envs.markdown_table(), "docs/environment.md is stale: paste envs.markdown_table() into it"


def test_no_module_reads_a_variable_of_ours_but_envs_py():
    read = re.compile(r"(environ(\.get)?|getenv)\s*[\(\[]\s*[\"']PADDLEX_NPU_")
    offenders = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "paddlex_npu").rglob("*.py")
        if p.name != "envs.py" and read.search(p.read_text(encoding="utf-8"))
    ]
    assert not offenders, f"read PADDLEX_NPU_* through paddlex_npu.envs instead: {offenders}"


def test_every_variable_the_package_names_is_in_the_table():
    names = {v.name for v in envs.VARIABLES}
    named = set()
    for p in (ROOT / "paddlex_npu").rglob("*.py"):
        named.update(re.findall(r"PADDLEX_NPU_[A-Z_]*[A-Z]", p.read_text(encoding="utf-8")))
    assert named - NOT_VARIABLES <= names, sorted(named - NOT_VARIABLES - names)


def test_accessors_read_the_environment_at_call_time(monkeypatch, tmp_path):
    monkeypatch.setenv(envs.CACHE.name, str(tmp_path))
    monkeypatch.setenv(envs.RUNTIME.name, "")
    monkeypatch.setenv(envs.AUTO_INSTALL.name, "0")
    assert envs.cache_dir() == tmp_path and envs.runtime() is None and not envs.auto_install()
    monkeypatch.delenv(envs.CACHE.name)
    assert envs.cache_dir() == Path.home() / ".cache" / "paddlex_npu"


def test_the_libraries_off_switches_are_set_unless_the_environment_sets_them(monkeypatch):
    for var, _ in envs.EGRESS_DEFAULTS:
        monkeypatch.delenv(var.name, raising=False)
    monkeypatch.setenv(envs.ORT_TELEMETRY.name, "0")  # the operator's choice wins
    set_now = envs.no_egress()
    assert envs.ORT_TELEMETRY.name not in set_now and envs.ORT_TELEMETRY.get() == "0"
    assert {name: envs.EnvVar(name, "", "").get() for name in set_now} == {
        var.name: value for var, value in envs.EGRESS_DEFAULTS if var is not envs.ORT_TELEMETRY
    }
