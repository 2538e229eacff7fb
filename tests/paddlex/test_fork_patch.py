"""Fork patches: apply cleanly to a fresh copy of the installed (pristine) PaddleX wheel, route OCR to the OM
runner with no `import paddlex_npu` (applying what the ledger's fork column lists), refuse what they cannot patch
without touching files, revert byte for byte."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from packaging.version import Version

from paddlex_npu.paddlex.fork_patch import available_versions, find_paddlex_dir, load_patch
from paddlex_npu.samples import assets
from tests.helpers import ENGLISH, NPU_HPI, REPO, norm
from tests.paddlex.test_patch_ledger import NAMES, ledger

INSTALLED = importlib.metadata.version("paddlex")  # 3.7.2 or 3.4.3: both have a patch


def _digest(folder: Path) -> dict:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*.py"))
    }


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "paddlex_npu.cli", "patch", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PADDLEX_NPU_AUTO_INSTALL": "0"},
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A fresh copy of the installed PaddleX package (and its .dist-info) in a site-packages folder of its own."""
    src = find_paddlex_dir()
    site = tmp_path_factory.mktemp("site") / "site-packages"
    shutil.copytree(src, site / "paddlex", ignore=shutil.ignore_patterns("__pycache__"))
    for info in src.parent.glob("paddlex-*.dist-info"):
        shutil.copytree(info, site / info.name)
    return site


def test_patch_applies_routes_without_the_import_and_reverts_byte_for_byte(site, asset_root, images):
    pristine = _digest(site / "paddlex")
    assert _digest(find_paddlex_dir()) == pristine  # the installed wheel is untouched by the suite

    out = _cli("--check", "--paddlex-dir", str(site / "paddlex"))
    assert out.returncode == 0 and "patch applies cleanly" in out.stdout, out.stderr
    out = _cli("--apply", "--paddlex-dir", str(site / "paddlex"))
    assert out.returncode == 0, out.stderr
    assert _digest(site / "paddlex") != pristine
    assert "patch is applied" in _cli("--check", "--paddlex-dir", str(site / "paddlex")).stdout

    config = assets.ocr_pipeline_config(asset_root / "om")
    code = NAMES + textwrap.dedent(f"""
        import json, sys
        from paddlex import create_pipeline
        import paddlex
        assert paddlex.__file__.startswith({str(site)!r}), paddlex.__file__
        p = create_pipeline(config=json.loads({json.dumps(json.dumps(config))}), device="npu:0", use_hpip=True,
                            hpi_config={NPU_HPI!r})
        (res,) = list(p.predict({str(images["english"])!r}))
        import paddlex_npu, paddlex_npu.run.runner as r
        from paddlex_npu.paddlex import patcher
        det = getattr(p.text_det_model, "runner", None) or p.text_det_model.infer
        record = patcher.fork_record()
        print(json.dumps({{"texts": list(res["rec_texts"]), "om": isinstance(det, r.OMRunner),
                           "monkeypatched": paddlex_npu.is_installed(),
                           "forked": keys_of(record.attributes(), record.items())}}))
    """)
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop("PADDLEX_NPU_AUTO_INSTALL", None)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=REPO, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert norm(result["texts"]) == norm(ENGLISH)
    assert result["om"] is True and result["monkeypatched"] is False  # routed by the fork, not the monkeypatch
    assert set(result["forked"]) == ledger(Version(INSTALLED), fork=True)  # what the ledger says a fork gets

    out = _cli("--revert", "--paddlex-dir", str(site / "paddlex"))
    assert out.returncode == 0, out.stderr
    assert _digest(site / "paddlex") == pristine


def test_a_hunk_that_does_not_apply_leaves_every_file_untouched(site):
    p = load_patch(site / "paddlex")
    target = p.files[0].target(p.paddlex_dir)
    original = target.read_bytes()
    hunk = p.files[0].hunks[-1]
    context = next(ln[1:] for ln in hunk.lines if ln.startswith(" ") and ln[1:].strip())
    target.write_bytes(original.replace(context.encode(), b"# edited by hand", 1))
    try:
        before = _digest(site / "paddlex")
        out = _cli("--apply", "--paddlex-dir", str(site / "paddlex"))
        assert out.returncode == 1
        assert f"hunk {hunk.header} does not apply" in out.stderr and p.files[0].path in out.stderr
        assert _digest(site / "paddlex") == before
    finally:
        target.write_bytes(original)


def test_a_version_without_a_patch_is_refused(site):
    out = _cli("--check", "--paddlex-dir", str(site / "paddlex"), "--paddlex-version", "3.6.1")
    assert out.returncode == 1
    assert "no fork patch for PaddleX 3.6.1" in out.stderr and "patches exist for 3.4.3, 3.7.2" in out.stderr


def test_not_a_paddlex_folder(tmp_path):
    out = _cli("--check", "--paddlex-dir", str(tmp_path))
    assert out.returncode == 1 and "is not a PaddleX package folder" in out.stderr


@pytest.fixture
def copy_beside(site):
    """A copy of the PaddleX package in site-packages, in a folder not named paddlex, beside the live one."""
    copy = site / "paddlex_copy"
    shutil.copytree(site / "paddlex", copy)
    yield copy
    shutil.rmtree(copy)


def test_a_folder_not_named_paddlex_is_patched_itself_not_the_paddlex_beside_it(site, copy_beside):
    live, mine = _digest(site / "paddlex"), _digest(copy_beside)
    out = _cli("--apply", "--paddlex-dir", str(copy_beside), "--paddlex-version", INSTALLED)
    assert out.returncode == 0, out.stderr
    assert _digest(site / "paddlex") == live and _digest(copy_beside) != mine
    assert all(str(copy_beside) in line for line in out.stdout.splitlines()), out.stdout
    out = _cli("--check", "--paddlex-dir", str(copy_beside), "--paddlex-version", INSTALLED)
    assert f"at {copy_beside}: patch is applied" in out.stdout, out.stderr
    assert "patch applies cleanly" in _cli("--check", "--paddlex-dir", str(site / "paddlex")).stdout
    assert _cli("--revert", "--paddlex-dir", str(copy_beside), "--paddlex-version", INSTALLED).returncode == 0
    assert _digest(copy_beside) == mine and _digest(site / "paddlex") == live


def test_the_version_comes_from_the_named_folder_not_a_dist_info_beside_it(site, copy_beside):
    out = _cli("--check", "--paddlex-dir", str(copy_beside))
    assert out.returncode == 1 and f"cannot tell the PaddleX version of {copy_beside}" in out.stderr
    assert "Pass --paddlex-version" in out.stderr
    (copy_beside / ".version").write_text("3.6.1\n")
    out = _cli("--check", "--paddlex-dir", str(copy_beside))
    assert out.returncode == 1 and "no fork patch for PaddleX 3.6.1" in out.stderr
    (copy_beside / ".version").unlink()
    init = copy_beside / "__init__.py"
    init.write_text(init.read_text() + f'\n__version__ = "{INSTALLED}"\n')
    out = _cli("--check", "--paddlex-dir", str(copy_beside))
    assert out.returncode == 0 and f"PaddleX {INSTALLED} at {copy_beside}: patch applies cleanly" in out.stdout, (
        out.stderr
    )


def test_a_paddlex_folder_outside_site_packages_needs_its_version(site, tmp_path):
    """A folder named paddlex with a .dist-info beside it, but not installed: the version is not guessed."""
    shutil.copytree(site / "paddlex", tmp_path / "paddlex")
    for info in site.glob("paddlex-*.dist-info"):
        shutil.copytree(info, tmp_path / info.name)
    out = _cli("--check", "--paddlex-dir", str(tmp_path / "paddlex"))
    assert out.returncode == 1 and "it is not in site-packages (no .dist-info read)" in out.stderr
    assert f"{tmp_path} has no .git or PKG-INFO. Pass --paddlex-version" in out.stderr
    out = _cli("--check", "--paddlex-dir", str(tmp_path / "paddlex"), "--paddlex-version", INSTALLED)
    assert out.returncode == 0 and f"at {tmp_path / 'paddlex'}: patch applies cleanly" in out.stdout, out.stderr


def _added_line(p):
    """(file patch, hunk, one line the patch adds)."""
    for fp in p.files:
        for hunk in fp.hunks:
            for ln in hunk.lines:
                if ln.startswith("+") and ln[1:].strip():
                    return fp, hunk, ln[1:]
    raise AssertionError("the patch adds no line")


def test_a_hand_edited_patched_line_is_named_by_revert_and_check(site):
    assert _cli("--apply", "--paddlex-dir", str(site / "paddlex")).returncode == 0
    p = load_patch(site / "paddlex")
    fp, hunk, added = _added_line(p)
    target = fp.target(p.paddlex_dir)
    patched = target.read_bytes()
    target.write_bytes(patched.replace(added.encode(), b"# hand edit", 1))
    try:
        for action in ("--revert", "--check"):
            before = _digest(site / "paddlex")
            out = _cli(action, "--paddlex-dir", str(site / "paddlex"))
            assert out.returncode == 1, out.stdout
            assert "the patch is applied but was edited since" in out.stderr, out.stderr
            assert "is '# hand edit', expected " + repr(added) in out.stderr, out.stderr  # the edited line
            assert _digest(site / "paddlex") == before
    finally:
        target.write_bytes(patched)
        assert _cli("--revert", "--paddlex-dir", str(site / "paddlex")).returncode == 0


def test_apply_and_revert_keep_file_modes(site):
    p = load_patch(site / "paddlex")
    targets = [fp.target(p.paddlex_dir) for fp in p.files]
    modes = {}
    for i, t in enumerate(targets):
        os.chmod(t, (0o640, 0o755, 0o604)[i % 3])
        modes[t] = t.stat().st_mode & 0o7777
    try:
        for action in ("--apply", "--revert"):
            assert _cli(action, "--paddlex-dir", str(site / "paddlex")).returncode == 0
            assert {t: t.stat().st_mode & 0o7777 for t in targets} == modes, action
    finally:
        for t in targets:
            os.chmod(t, 0o644)


def _skeleton(site: Path, dest: Path) -> Path:
    """``dest``: a PaddleX package folder holding only what the patch reads (fast to copy), as a fork has it."""
    p = load_patch(site / "paddlex")
    for rel in ["__init__.py", "inference/__init__.py"] + [str(fp.target(Path("."))) for fp in p.files]:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(site / "paddlex" / rel, dest / rel)
    return dest


def _git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True,
        capture_output=True,
        timeout=60,
    )


def test_a_git_checkout_takes_its_version_from_the_nearest_release_tag(site, tmp_path):
    """PaddleX 3.x has no version in its files (get_pdx_version asks the .dist-info, else setuptools_scm on the
    checkout): a fork's checkout is read by its vX.Y.Z tag, its own commits on top keeping that version."""
    pkg = _skeleton(site, tmp_path / "PaddleX" / "paddlex")
    root = pkg.parent
    _git(root, "init", "-q")
    _git(root, "commit", "-q", "--allow-empty", "-m", "release")
    out = _cli("--check", "--paddlex-dir", str(pkg))
    assert out.returncode == 1 and f"git describe in {root} found no vX.Y.Z tag" in out.stderr, out.stderr
    assert "Pass --paddlex-version (e.g. --paddlex-version" in out.stderr
    _git(root, "tag", f"v{INSTALLED}")
    out = _cli("--check", "--paddlex-dir", str(pkg))
    assert f"PaddleX {INSTALLED} (from git tag v{INSTALLED}) at {pkg}: patch applies cleanly" in out.stdout, out.stderr
    _git(root, "commit", "-q", "--allow-empty", "-m", "the fork's own change")
    _git(root, "commit", "-q", "--allow-empty", "-m", "another")
    out = _cli("--apply", "--paddlex-dir", str(pkg))
    assert out.returncode == 0 and f"(from git tag v{INSTALLED} + 2 commits) at {pkg}" in out.stdout, out.stderr
    assert _cli("--revert", "--paddlex-dir", str(pkg)).returncode == 0


def test_an_unpacked_sdist_takes_its_version_from_pkg_info(site, tmp_path):
    pkg = _skeleton(site, tmp_path / f"paddlex-{INSTALLED}" / "paddlex")
    (pkg.parent / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: paddlex\nVersion: {INSTALLED}\n")
    out = _cli("--check", "--paddlex-dir", str(pkg))
    assert out.returncode == 0 and f"PaddleX {INSTALLED} at {pkg}: patch applies cleanly" in out.stdout, out.stderr
    (pkg.parent / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: other\nVersion: 1.0.0\n")
    out = _cli("--check", "--paddlex-dir", str(pkg))
    assert out.returncode == 1 and "cannot tell the PaddleX version" in out.stderr


def test_a_copied_package_folder_needs_its_version_and_a_placeholder_is_no_version(site, tmp_path):
    pkg = _skeleton(site, tmp_path / "pdx-copy")
    (pkg / ".version").write_text("0.0.0.dev0\n")  # a PaddleX source tree's .version before a build
    out = _cli("--check", "--paddlex-dir", str(pkg))
    assert out.returncode == 1 and f"cannot tell the PaddleX version of {pkg}: PaddleX 3.x takes it from" in out.stderr
    assert "it is not named paddlex" in out.stderr and "Pass --paddlex-version" in out.stderr
    out = _cli("--check", "--paddlex-dir", str(pkg), "--paddlex-version", INSTALLED)
    assert out.returncode == 0 and "patch applies cleanly" in out.stdout, out.stderr


def test_a_wrong_version_is_questioned_when_the_first_hunk_fails(site, tmp_path):
    """Another version's patch (3.7.2 on 3.4.3: the first hunk does not match; 3.4.3 on 3.7.2: its file is
    missing), or a file unlike the version's at the first hunk: the error asks about the version."""
    other = next(v for v in available_versions() if v != INSTALLED)
    out = _cli("--check", "--paddlex-dir", str(site / "paddlex"), "--paddlex-version", other)
    assert out.returncode == 1
    assert f"Is this folder PaddleX {other} (given by --paddlex-version)? (check --paddlex-version)" in out.stderr
    pkg = _skeleton(site, tmp_path / "paddlex")
    target = load_patch(pkg, INSTALLED).files[0].target(pkg)
    target.write_text("".join(f"line {i} of another PaddleX\n" for i in range(600)))
    out = _cli("--check", "--paddlex-dir", str(pkg), "--paddlex-version", INSTALLED)
    hunk = load_patch(pkg, INSTALLED).files[0].hunks[0]
    assert f"{target}: hunk {hunk.header} does not apply: line {hunk.old_start} is " in out.stderr, out.stderr
    assert f"Is this folder PaddleX {INSTALLED} (given by --paddlex-version)?" in out.stderr


def test_an_edit_after_the_first_hunk_is_named_with_the_fix_not_the_version(site):
    p = load_patch(site / "paddlex")
    fp, hunk = p.files[-1], p.files[-1].hunks[-1]
    target = fp.target(p.paddlex_dir)
    original = target.read_bytes()
    context = next(ln[1:] for ln in hunk.lines if ln.startswith(" ") and ln[1:].strip())
    lines = original.decode().splitlines(keepends=True)
    line = [ln.rstrip("\n") for ln in lines].index(context, hunk.old_start - 1) + 1
    lines[line - 1] = "# edited by hand\n"
    target.write_text("".join(lines))
    try:
        out = _cli("--apply", "--paddlex-dir", str(site / "paddlex"))
        assert out.returncode == 1 and f"line {line} is '# edited by hand'" in out.stderr, out.stderr
        assert (
            f"it differs from PaddleX {INSTALLED}. To fix: undo the hand edit at line {line} of {target}" in out.stderr
        )
        assert "Is this folder" not in out.stderr
    finally:
        target.write_bytes(original)


@pytest.mark.parametrize("which", ["first", "last"])
def test_a_hand_edited_patched_line_is_named_by_its_line_on_disk(site, which):
    """In a patched file a hunk sits at its new-side line (@@ -406 +410 @@: 410, not 406): the edited line is
    named where it is on disk, with the fix."""
    assert _cli("--apply", "--paddlex-dir", str(site / "paddlex")).returncode == 0
    p = load_patch(site / "paddlex")
    fp, hunk = (p.files[0], p.files[0].hunks[0]) if which == "first" else (p.files[-1], p.files[-1].hunks[-1])
    added = next(ln[1:] for ln in hunk.lines if ln.startswith("+") and ln[1:].strip())
    target = fp.target(p.paddlex_dir)
    patched = target.read_bytes()
    line = patched.decode().splitlines().index(added) + 1
    target.write_bytes(patched.replace(added.encode(), b"# hand edit", 1))
    try:
        for action in ("--check", "--revert"):
            out = _cli(action, "--paddlex-dir", str(site / "paddlex"))
            assert out.returncode == 1, out.stdout
            assert (
                f"{target}: hunk {hunk.header} does not apply: line {line} is '# hand edit', expected " + repr(added)
                in out.stderr
            ), out.stderr
            assert f"To fix: undo the hand edit at line {line} of {target}" in out.stderr
            reinstall = f"pip install --force-reinstall --no-deps paddlex=={INSTALLED}"
            assert f"or reinstall PaddleX {INSTALLED} (`{reinstall}`" in out.stderr
            assert out.stderr.rstrip().endswith("run `paddlex-npu patch --apply` again")
    finally:
        target.write_bytes(patched)
        assert _cli("--revert", "--paddlex-dir", str(site / "paddlex")).returncode == 0


def test_a_folder_that_is_not_the_paddlex_package_is_refused(site):
    own = REPO / "paddlex_npu"  # a package with a version of its own (paddlex-npu's), not PaddleX
    out = _cli("--check", "--paddlex-dir", str(own))
    assert out.returncode == 1 and f"{own} is not a PaddleX package folder (no inference/ subpackage)" in out.stderr
    assert "no fork patch" not in out.stderr
    out = _cli("--check", "--paddlex-dir", str(site))  # the folder above it
    assert f"{site} is not a PaddleX package folder (no __init__.py)" in out.stderr
    assert f"did you mean {site / 'paddlex'}?" in out.stderr
    init = site / "paddlex" / "__init__.py"
    out = _cli("--check", "--paddlex-dir", str(init))
    assert out.returncode == 1 and f"{init} is a file: --paddlex-dir must be the PaddleX package folder" in out.stderr
    assert f"did you mean {site / 'paddlex'}?" in out.stderr
    out = _cli("--check", "--paddlex-dir", str(site / "nowhere"))
    assert out.returncode == 1 and f"{site / 'nowhere'} does not exist" in out.stderr


def test_patch_help_says_where_the_version_comes_from():
    out = subprocess.run(
        [sys.executable, "-m", "paddlex_npu.cli", "patch", "--help"], capture_output=True, text=True, timeout=60
    )
    text = " ".join(out.stdout.split())
    assert "read from the .dist-info beside it" not in text
    assert "Needed for a copied package folder, which carries no version" in text
