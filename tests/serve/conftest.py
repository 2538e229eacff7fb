"""Fixtures for the servers: free loopback ports, the OCR pipeline YAML over the real model folders, a real
server process started before and stopped after."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, List, NamedTuple, Optional

import pytest
import yaml

from paddlex_npu.samples import assets
from tests.paddlex.conftest import npu_pipeline  # noqa: F401  (the in-process reference)

pytest.importorskip("fastapi", reason="serving needs requirements/serving.txt (installed into .venv by setup.sh)")


def free_ports(n: int) -> List[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_until(ready: Callable[[], bool], proc: subprocess.Popen, timeout: float, log: Path) -> Optional[str]:
    """None when ready; else why not (the process exited, or the time ran out), with the log's tail."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            return f"exited with {proc.returncode}: {log.read_text(errors='replace')[-3000:]}"
        try:
            if ready():
                return None
        except OSError:
            pass
        time.sleep(0.5)
    return f"not ready after {timeout:.0f} s: {log.read_text(errors='replace')[-3000:]}"


def children(pid: int) -> List[int]:
    """The child processes of ``pid`` (started from any of its threads)."""
    found: List[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(k) for k in (task / "children").read_text().split()]
    return found


def cpu_ticks(pid: int) -> int:
    """User + system CPU ticks a process has used (/proc/PID/stat utime + stime); 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])


def wait_busy(pids: List[int], timeout: float = 60, ticks: int = 5) -> None:
    """Return once one of ``pids`` has computed for ``ticks`` more CPU ticks (a request is in flight there): what
    a shutdown test waits on, rather than a guess of how long a request takes. Bounded by ``timeout``."""
    base = {p: cpu_ticks(p) for p in pids}
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if any(cpu_ticks(p) - base[p] >= ticks for p in pids):
            return
        time.sleep(0.01)
    raise AssertionError(f"no request reached the processes {pids} within {timeout:.0f} s")


def stop(proc: subprocess.Popen, timeout: float = 60) -> int:
    if proc.poll() is None:
        proc.terminate()
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


@pytest.fixture(scope="session")
def pipeline_yaml(asset_root, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("serve") / "ocr.yaml"
    config = assets.ocr_pipeline_config(asset_root / "om")
    config["Serving"] = {"visualize": False}
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def server_env() -> dict:
    env = dict(os.environ)
    env["PADDLEX_NPU_RUNTIME"] = "reference"
    return env


class Tritonserver(NamedTuple):
    proc: subprocess.Popen
    log: Path
    http: int
    grpc: int
    metrics: int


def start_tritonserver(repo_root: Path, root: Path, edit_env: Optional[Callable[[dict], dict]] = None) -> Tritonserver:
    """A real tritonserver (nvidia-pytriton's) on free loopback ports over a repository, on the reference runtime;
    its output in ``root/tritonserver.log`` (its environment as ``edit_env`` returns it). The caller waits for it
    to be ready and stops it."""
    from paddlex_npu.triton.repo import tritonserver_command

    http, grpc, metrics = free_ports(3)
    argv, env = tritonserver_command(repo_root, root / "work", http, grpc, metrics, host="127.0.0.1")
    env.update({k: v for k, v in server_env().items() if k.startswith(("PADDLE", "PADDLEX_NPU"))})
    env = edit_env(env) if edit_env else env
    log = root / "tritonserver.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    return Tritonserver(proc, log, http, grpc, metrics)


def wait_for_tritonserver(server: Tritonserver, client: Any) -> None:
    """Until ``client`` finds the server ready (240 s); skips when tritonserver cannot start on this machine, fails
    when a model does not load."""
    why = wait_until(client.is_server_ready, server.proc, 240, server.log)
    if why is not None:
        stop(server.proc)
    if why and "failed to load" not in why and "Traceback" not in why:
        pytest.skip(f"tritonserver cannot start on this machine: {why}")
    assert why is None, why


def rss_peak(pid: int) -> int:
    """The peak resident memory of a process so far, in bytes (/proc/PID/status VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM in /proc/{pid}/status")


@pytest.fixture(scope="module")
def internal(images):
    """Two local HTTP servers serving the English sample image: on 127.0.0.1 the internal host (what must not be
    fetched), on 127.0.0.2 the host tests allow (tests/serve/internal_host.py)."""
    from tests.serve.internal_host import InternalHost

    files = {"english.png": images["english"].read_bytes()}
    with InternalHost(files) as secret, InternalHost(files, address="127.0.0.2") as allowed:
        yield {"secret": secret, "allowed": allowed}
