"""OM packages (om/package.py): what makes a folder one, what each runtime needs of it, and what the refusals say."""

from __future__ import annotations

import json
import locale
import logging
from pathlib import Path

import pytest

from paddlex_npu.errors import IllegalPathError, ModelFileError
from paddlex_npu.om.manifest import MANIFEST_NAME
from paddlex_npu.om.package import OMPackage, is_om_package, resolve_om_package
from tests.onnx_models import tiny_package

YML_HOW = "copy inference.yml from the PaddleX model folder the OM was converted from"
ONNX_HOW = (
    "the CPU reference runtime runs the ONNX the OM was converted from; build the package from the PaddleX "
    "model folder with `paddlex-npu convert <paddle folder> -o <package>`, which writes it"
)
NO_OM = (
    "model folder {folder} has no inference.om, which runtime 'ais_bench' runs on the NPU: without an NPU, "
    "set PADDLEX_NPU_RUNTIME=reference (its inference.onnx then runs on the CPU); on an Ascend machine, build "
    "the OM with {build}.\n{detail}"
)


def _files(folder: Path, *names: str) -> Path:
    """``folder`` with small non-empty files of these names."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_text("x")
    return folder


def _plain_warnings(caplog) -> list:
    return [r.getMessage() for r in caplog.records if "is no OM package" in r.getMessage()]


@pytest.mark.parametrize(
    "names, expect",
    [
        (("inference.yml", "inference.om"), True),
        (("inference.yml", MANIFEST_NAME), True),  # convert's package for the reference runtime: no OM yet
        (("inference.yml", "inference.om", MANIFEST_NAME), True),
        (("inference.yml", "inference.onnx"), False),  # a plain PaddleX ONNX folder
        (("inference.om", MANIFEST_NAME), False),  # no inference.yml
        (("inference.yml",), False),
        ((), False),
    ],
)
def test_a_package_is_inference_yml_beside_the_om_or_its_manifest(tmp_path, names, expect):
    folder = _files(tmp_path / "pkg", *names)
    assert is_om_package(folder) is expect
    assert is_om_package(str(folder)) is expect


def test_folders_named_like_the_files_do_not_make_a_package(tmp_path):
    folder = _files(tmp_path / "pkg", "inference.yml")
    (folder / "inference.om").mkdir()
    assert not is_om_package(folder)
    (folder / MANIFEST_NAME).mkdir()
    assert not is_om_package(folder)


def test_the_device_runtime_gets_the_om_and_the_onnx_only_when_present(tmp_path):
    om_only = _files(tmp_path / "om_only", "inference.yml", "inference.om")
    assert resolve_om_package(om_only, "ais_bench") == OMPackage(om_only, om_only / "inference.om", None)
    assert resolve_om_package(str(om_only), "ais_bench").manifest_path is None
    both = _files(tmp_path / "both", "inference.yml", "inference.om", "inference.onnx", MANIFEST_NAME)
    package = resolve_om_package(both, "ais_bench")
    assert package == OMPackage(both, both / "inference.om", both / "inference.onnx")
    assert package.manifest_path == both / MANIFEST_NAME


@pytest.mark.parametrize("runtime", ["reference", "simulated"])
def test_the_onnx_runtimes_need_the_onnx_not_the_om(tmp_path, runtime):
    folder = tiny_package(tmp_path / runtime)
    package = resolve_om_package(folder, runtime)
    assert package == OMPackage(folder, folder / "inference.om", folder / "inference.onnx")
    (folder / "inference.onnx").unlink()
    (folder / "inference.om").write_text("x")
    with pytest.raises(ModelFileError) as info:
        resolve_om_package(folder, runtime)
    assert str(info.value) == f"model folder {folder} has no inference.onnx: {ONNX_HOW}"


def test_no_folder_or_no_such_folder_is_refused(tmp_path):
    with pytest.raises(ModelFileError, match="needs a local model folder"):
        resolve_om_package(None, "ais_bench")
    with pytest.raises(ModelFileError, match="does not exist or is not a folder"):
        resolve_om_package(tmp_path / "nowhere", "reference")
    with pytest.raises(ModelFileError, match="does not exist or is not a folder"):
        resolve_om_package(_files(tmp_path, "file") / "file", "reference")


@pytest.mark.parametrize("runtime", ["ais_bench", "reference"])
def test_inference_yml_must_be_there_and_hold_something(tmp_path, runtime):
    folder = _files(tmp_path / "pkg", "inference.om", "inference.onnx")
    with pytest.raises(ModelFileError) as info:
        resolve_om_package(folder, runtime)
    assert str(info.value) == f"model folder {folder} has no inference.yml: {YML_HOW}"
    (folder / "inference.yml").write_text("")
    with pytest.raises(ModelFileError) as info:
        resolve_om_package(folder, runtime)
    assert str(info.value).startswith(f"{folder / 'inference.yml'} cannot be read (permissions or an empty file)")
    assert str(info.value).endswith(f"; {YML_HOW}")
    (folder / "inference.yml").write_text("x")  # one byte is enough: the route reads it later
    assert resolve_om_package(folder, runtime).om_path == folder / "inference.om"


def test_an_empty_om_is_refused_with_build_it_again(tmp_path):
    folder = _files(tmp_path / "pkg", "inference.yml")
    (folder / "inference.om").write_bytes(b"")
    with pytest.raises(ModelFileError) as info:
        resolve_om_package(folder, "ais_bench")
    assert str(info.value).endswith(
        "cannot be read (permissions or an empty file): fix its permissions or produce "
        "it again; build it again with ATC"
    )


def test_the_reference_runtime_refuses_what_the_device_would_and_names_the_om(tmp_path):
    """The path checks name the OM, as ais_bench does on the device, though the ONNX is the file here."""
    folder = tiny_package(tmp_path / "a b")
    with pytest.raises(IllegalPathError, match=rf"^The path:{folder / 'inference.om'} is illegal\. .*characters ' '"):
        resolve_om_package(folder, "reference")
    good = tiny_package(tmp_path / "good")
    (good / "inference.onnx").chmod(0o664)  # the ONNX's own mode: no OM here to examine
    with pytest.raises(IllegalPathError, match=r"writable by its group or others \(mode 664"):
        resolve_om_package(good, "reference")


def test_a_plain_onnx_folder_is_said_to_be_no_package_once(tmp_path, caplog):
    plain = tiny_package(tmp_path / "plain")
    with caplog.at_level(logging.WARNING, logger="paddlex_npu"):
        resolve_om_package(plain, "reference")
        resolve_om_package(plain, "reference")
    assert _plain_warnings(caplog) == [
        f"{plain} is no OM package (no inference.om, no {MANIFEST_NAME}): runtime reference runs its "
        f"inference.onnx, an NPU could not; build a package with `paddlex-npu convert {plain} -o PACKAGE`"
    ]


@pytest.mark.parametrize("extra", ["inference.om", MANIFEST_NAME])
def test_a_package_on_the_reference_runtime_is_not_warned_about(tmp_path, caplog, extra):
    folder = tiny_package(tmp_path / "pkg")
    (folder / extra).write_text("{}")
    with caplog.at_level(logging.WARNING, logger="paddlex_npu"):
        resolve_om_package(folder, "reference")
    assert _plain_warnings(caplog) == []


def test_no_om_on_the_device_names_atc_and_the_cpu_runtime(tmp_path):
    """The fixes first: the CPU runtime without an NPU, ATC on an Ascend machine; the ATC command after."""
    folder = tiny_package(tmp_path / "pkg")
    with pytest.raises(ModelFileError) as info:
        resolve_om_package(folder, "ais_bench")
    detail = (
        f"e.g. `atc --framework=5 --model={folder / 'inference.onnx'} --output={folder / 'inference'} "
        '--soc_version=<your chip, see npu-smi info> --input_shape="x:-1,3,-1,-1"` (dymshape needs Ascend 310P '
        "or 910), or build a package from the PaddleX model folder with `paddlex-npu convert`."
    )
    assert str(info.value) == NO_OM.format(
        folder=folder, build="ATC from its inference.onnx (command below)", detail=detail
    )


@pytest.mark.parametrize("manifest", ["not json", "[1, 2]", json.dumps({"mode": "dymshape"})])
def test_no_om_and_no_recorded_command_falls_back_to_the_generic_atc_line(tmp_path, manifest):
    folder = tiny_package(tmp_path / "pkg")
    (folder / MANIFEST_NAME).write_text(manifest)
    with pytest.raises(ModelFileError) as info:
        resolve_om_package(folder, "ais_bench")
    assert "build the OM with ATC from its inference.onnx (command below).\ne.g. `atc --framework=5" in str(info.value)


def test_no_om_names_the_atc_command_the_package_records(tmp_path):
    folder = tiny_package(tmp_path / "pkg")
    command = "atc --framework=5 --model=inference.onnx --output=inference --soc_version=Ascend310P3"
    (folder / MANIFEST_NAME).write_text(json.dumps({"mode": "dymshape", "atc_command": command}), encoding="utf-8")
    with pytest.raises(ModelFileError) as info:
        resolve_om_package(folder, "ais_bench")
    assert str(info.value) == NO_OM.format(
        folder=folder,
        build=f"the ATC command this package was converted with (`paddlex-npu inspect {folder}` shows it)",
        detail=f"Run it in {folder}, then rename the OM ATC writes (inference*.om) to inference.om: {command}",
    )


def test_no_om_names_the_packages_atc_sh_before_its_recorded_command(tmp_path):
    folder = tiny_package(tmp_path / "pkg")
    (folder / MANIFEST_NAME).write_text(json.dumps({"atc_command": "atc --framework=5"}))
    (folder / "atc.sh").write_text("atc --framework=5 ...\n")
    with pytest.raises(ModelFileError) as info:
        resolve_om_package(folder, "ais_bench")
    assert str(info.value) == NO_OM.format(
        folder=folder,
        build=f"`bash {folder / 'atc.sh'}`",
        detail="atc.sh is the ATC command `paddlex-npu convert` wrote for this package (its chip, ranges or gears); "
        "it names the OM inference.om.",
    )


@pytest.fixture()
def ascii_locale():
    """The C locale's ASCII as the locale's encoding (a bare container's), restored afterwards."""
    before = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    yield
    locale.setlocale(locale.LC_CTYPE, before)


def test_the_recorded_command_is_read_as_utf_8_whatever_the_locale(tmp_path, ascii_locale):
    """The manifest is UTF-8 (OMManifest.save): a command naming a non-ASCII folder is still read under C."""
    folder = tiny_package(tmp_path / "pkg")
    command = "atc --framework=5 --model=/data/模型/inference.onnx --output=inference --soc_version=Ascend310P3"
    (folder / MANIFEST_NAME).write_text(json.dumps({"atc_command": command}, ensure_ascii=False), encoding="utf-8")
    with pytest.raises(ModelFileError) as info:
        resolve_om_package(folder, "ais_bench")
    assert str(info.value).endswith(f"to inference.om: {command}")
