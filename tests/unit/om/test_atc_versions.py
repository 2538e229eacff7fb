"""ATC across CANN versions, with stand-in ``atc`` executables on PATH: the precision option each ATC takes, ATC's
own working folder, fp16 on the inference chips, and the chip names ATC's ``--soc_version`` documents."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from paddlex_npu.build.convert import _atc_script, run_atc
from paddlex_npu.errors import ConfigError
from paddlex_npu.om import manifest as mf
from paddlex_npu.om.atc import atc_args, atc_has_precision_mode_v2, check_precision, check_soc_version

# An ATC that writes what it was given and where it ran, and kernel_meta/ into its working folder as ATC does. The
# old one (CANN 6.x) does not know --precision_mode_v2: its --help does not list it and it refuses it.
FAKE_ATC = """#!/usr/bin/env bash
if [ "$1" = --help ]; then echo "  --precision_mode  precision"; {v2_help} exit 0; fi
{v2_refuse}
echo "$PWD" > "$ATC_RECORD.cwd"; echo "$@" > "$ATC_RECORD.args"
mkdir -p kernel_meta
for a in "$@"; do case "$a" in --output=*) touch "${{a#--output=}}_linux_x86_64.om";; esac; done
"""
NEW = {"v2_help": 'echo "  --precision_mode_v2  precision (v2)";', "v2_refuse": ""}
OLD = {
    "v2_help": "",
    "v2_refuse": 'for a in "$@"; do case "$a" in --precision_mode_v2*) echo "unknown option $a" >&2; exit 1;; '
    "esac; done",
}
MAN = mf.parse({"mode": "dymshape", "inputs": [{"name": "x", "shape": [1, 3, -1, -1]}]}, "test")


@pytest.fixture(params=["new", "old"])
def atc(request, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "atc"
    exe.write_text(FAKE_ATC.format(**(NEW if request.param == "new" else OLD)))
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("ATC_RECORD", str(tmp_path / "record"))
    return request.param, tmp_path / "record"


def test_the_precision_option_is_the_one_this_atc_knows(atc):
    kind, _ = atc
    assert atc_has_precision_mode_v2() is (kind == "new")
    args = atc_args(Path("m.onnx"), Path("out"), "Ascend310P3", MAN, "fp16", atc_has_precision_mode_v2())
    assert args[-1] == ("--precision_mode_v2=fp16" if kind == "new" else "--precision_mode=force_fp16")


def test_atc_runs_in_a_folder_of_its_own_never_the_callers(atc, tmp_path, monkeypatch):
    kind, record = atc
    caller = tmp_path / "caller"
    caller.mkdir()
    monkeypatch.chdir(caller)
    out = tmp_path / "pkg"
    out.mkdir()
    args = atc_args(out / "inference.onnx", out / "inference", "Ascend310P3", MAN, "fp16", kind == "new")
    run_atc(args, out / "atc.log")
    ran_in = Path(Path(f"{record}.cwd").read_text().strip())
    assert ran_in != caller and ran_in != out and not ran_in.exists()  # a throwaway folder, removed afterwards
    assert not (caller / "kernel_meta").exists() and (out / "inference_linux_x86_64.om").is_file()


def test_atc_sh_probes_the_atc_it_finds(atc, tmp_path):
    """The script written where no ATC is installed picks the option when it runs, on the machine with CANN."""
    kind, record = atc
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    script = pkg / "atc.sh"
    script.write_text(
        _atc_script(atc_args(Path("inference.onnx"), Path("inference"), "Ascend310P3", MAN, None), "fp16")
    )
    script.chmod(0o755)
    done = subprocess.run([str(script)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    given = Path(f"{record}.args").read_text()
    assert given.rstrip().endswith("--precision_mode_v2=fp16" if kind == "new" else "--precision_mode=force_fp16")
    assert (pkg / "inference.om").is_file()  # renamed from inference_linux_x86_64.om


@pytest.mark.parametrize("soc", ["Ascend310P3", "Ascend310P3vir04", "Ascend310B1", "Ascend310"])
def test_fp32_is_refused_on_the_fp16_inference_chips(soc):
    with pytest.raises(ConfigError, match=f"--precision fp32 on {soc}: Ascend310/310B/310P compute"):
        check_precision(soc, "fp32")
    check_precision(soc, "fp16")
    check_precision("Ascend910B4", "fp32")


@pytest.mark.parametrize(
    "soc",
    ["Ascend310P7", "Ascend910B2C", "Ascend910B4-1", "Ascend310P3vir01", "Ascend310P3vir02", "Ascend310P3vir04"]
    + ["Ascend310P3vir08", "Ascend950PR_9579", "Ascend950"],
)
def test_real_chip_names_are_accepted(soc):
    check_soc_version(soc)


@pytest.mark.parametrize("soc", ["Ascend310P3vir03", "Ascend910B4-2", "Ascend310P3vir"])
def test_names_no_atc_documents_are_refused(soc):
    with pytest.raises(ConfigError, match="is not an Ascend chip ATC builds for"):
        check_soc_version(soc)


def test_dymhw_with_two_image_inputs_as_atc_takes_it():
    """ais_bench's test/get_add_model_data.sh builds add_model_dymhw from two 1,3,-1,-1 inputs with
    --dynamic_image_size=32,32;64,64: the same gear applies to both."""
    from paddlex_npu.om.atc import gear_mode_for

    shapes = [[1, 3, -1, -1], [1, 3, -1, -1]]
    assert gear_mode_for(shapes, ["NCHW", "NCHW"]) == "dymhw"
    inputs = [{"name": n, "shape": s} for n, s in zip(("input1", "input2"), shapes)]
    man = mf.parse({"mode": "dymhw", "inputs": inputs, "gears": [[32, 32], [64, 64]]}, "test")
    assert man.gear_shapes()[1] == [[1, 3, 64, 64], [1, 3, 64, 64]]
    command = " ".join(atc_args(Path("m.onnx"), Path("out"), "Ascend310P3", man, "fp16"))
    assert "--input_shape=input1:1,3,-1,-1;input2:1,3,-1,-1 --dynamic_image_size=32,32;64,64" in command
    with pytest.raises(ConfigError, match="dymhw needs NCHW inputs with -1 at H and W and no other -1 dims"):
        mf.parse({"mode": "dymhw", "inputs": [{"name": "x", "shape": [-1, 3, -1, -1]}], "gears": [[1, 2], [3, 4]]}, "t")


def _atc_exe(folder: Path, body: str) -> Path:
    """An ``atc`` executable in ``folder`` running ``body`` (bash)."""
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / "atc"
    exe.write_text("#!/usr/bin/env bash\n" + body)
    exe.chmod(0o755)
    return exe


def test_the_probe_runs_atc_help_in_a_throwaway_folder(tmp_path, monkeypatch):
    """``atc --help`` writes kernel_meta/ and logs into its working folder, as every ATC run does."""
    record = tmp_path / "cwd"
    exe = _atc_exe(tmp_path / "bin", f'echo "$PWD" > {record}; mkdir -p kernel_meta; echo "  --precision_mode_v2"\n')
    monkeypatch.chdir(tmp_path)
    assert atc_has_precision_mode_v2(str(exe)) is True
    ran_in = Path(record.read_text().strip())
    assert ran_in.name.startswith("paddlex-npu-atc-") and ran_in.parent != tmp_path and not ran_in.exists()
    assert not (tmp_path / "kernel_meta").exists()


def test_the_probe_reads_help_that_is_not_utf_8(tmp_path):
    """A Chinese-locale ATC may print its help in GBK: the bytes that are no UTF-8 do not stop the probe."""
    exe = _atc_exe(tmp_path, "printf '\\xc4\\xa3\\xd0\\xcd  --precision_mode_v2\\n'\n")
    assert atc_has_precision_mode_v2(str(exe)) is True
    assert (
        atc_has_precision_mode_v2(str(_atc_exe(tmp_path / "old", "printf '\\xc4\\xa3  --precision_mode\\n'\n")))
        is False
    )


def test_the_probe_says_no_when_atc_is_missing_broken_or_hangs(tmp_path):
    """No answer is no ``--precision_mode_v2``: the older --precision_mode is the option every ATC takes."""
    assert atc_has_precision_mode_v2(str(tmp_path / "no-atc")) is False
    (tmp_path / "not-executable").write_text("echo --precision_mode_v2\n")
    assert atc_has_precision_mode_v2(str(tmp_path / "not-executable")) is False
    stuck = _atc_exe(tmp_path / "stuck", "exec sleep 20\n")
    start = time.monotonic()
    assert atc_has_precision_mode_v2(str(stuck), timeout=0.3) is False
    assert time.monotonic() - start < 10
