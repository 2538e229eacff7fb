"""``deploy/entrypoint.sh`` under dash (``/bin/sh`` of Ubuntu's CANN images and Debian): it sources CANN's
bash-syntax ``set_env.sh`` files through bash and still runs the command with their environment."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from paddlex_npu import envs

ENTRYPOINT = Path(__file__).resolve().parents[2] / "deploy" / "entrypoint.sh"
DASH = shutil.which("dash")
pytestmark = pytest.mark.skipif(DASH is None, reason="dash is not installed (apt-get install dash)")

# Written like CANN 8.5's nnal/atb/set_env.sh: an array, [[ ]], ${BASH_SOURCE[0]}, a function, and a last test that
# may be false (the file then "returns" non-zero). dash stops at the array with `Syntax error: "(" unexpected`.
SET_ENV = r"""#!/bin/bash
paths=(lib lib64)
function atb_home() {
    cd "$(dirname "${BASH_SOURCE[0]}")" && pwd
}
ATB_HOME_PATH=$(atb_home)
export ATB_HOME_PATH
for p in "${paths[@]}"; do
    if [[ -d "$ATB_HOME_PATH/$p" ]]; then LD_LIBRARY_PATH="$ATB_HOME_PATH/$p:${LD_LIBRARY_PATH}"; fi
done
export LD_LIBRARY_PATH
export ASCEND_HOME_PATH="${ATB_HOME_PATH%/nnal/atb}/ascend-toolkit/latest"
set --  # a file that changes the positional parameters must not change the command
[[ -n "$ATB_CXX_ABI_0" ]]
"""


@pytest.fixture
def ascend_root(tmp_path) -> Path:
    atb = tmp_path / "Ascend" / "nnal" / "atb"
    (atb / "lib").mkdir(parents=True)
    (atb / "set_env.sh").write_text(SET_ENV, encoding="utf-8")
    return tmp_path / "Ascend"


def _run(root: Path, *command: str, path: str = "/usr/bin:/bin") -> subprocess.CompletedProcess:
    env = {"PATH": path, envs.ASCEND_ROOT.name: str(root)}
    return subprocess.run([DASH, str(ENTRYPOINT), *command], env=env, capture_output=True, text=True, timeout=30)


def test_the_fixture_is_bash_only(ascend_root):
    """The check below means something: dash itself cannot source this set_env.sh."""
    out = subprocess.run(
        [DASH, "-c", f". {ascend_root / 'nnal/atb/set_env.sh'}"], capture_output=True, text=True, timeout=30
    )
    assert out.returncode != 0 and "Syntax error" in out.stderr, out


def test_under_dash_the_command_runs_with_cann_s_environment(ascend_root):
    out = _run(ascend_root, "sh", "-c", 'echo "$ATB_HOME_PATH|$LD_LIBRARY_PATH|$ASCEND_HOME_PATH|$0|$1"', "a", "b c")
    assert out.returncode == 0, out.stderr
    atb = ascend_root / "nnal" / "atb"
    assert out.stdout.strip() == f"{atb}|{atb}/lib:|{ascend_root}/ascend-toolkit/latest|a|b c"
    assert "set_env.sh returned 1" in out.stderr  # the false last test: said, and the command still ran


def test_without_set_env_the_command_runs_as_is(tmp_path):
    out = _run(tmp_path / "nothing", "sh", "-c", 'echo "[$ASCEND_HOME_PATH]" "$0"', "x")
    assert (out.returncode, out.stdout, out.stderr) == (0, "[] x\n", "")


def test_the_command_s_exit_status_is_the_container_s(ascend_root):
    assert _run(ascend_root, "sh", "-c", "exit 7").returncode == 7


def test_without_bash_it_says_so(ascend_root, tmp_path):
    bin_dir = tmp_path / "bin"  # a PATH with the tools the entrypoint needs, but no bash
    bin_dir.mkdir()
    out = _run(ascend_root, "true", path=str(bin_dir))
    assert out.returncode == 1
    assert "CANN's set_env.sh needs bash, which is not in this image: install bash" in out.stderr
