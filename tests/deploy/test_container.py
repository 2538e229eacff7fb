"""The CPU twin of deploy/Dockerfile, run as a pod runs it: ``serve`` on the reference runtime as the image's
non-root user, the root file system read-only, the OM packages mounted read-only, no network (every query comes
from inside the container through ``podman exec``), CANN's bash-syntax set_env.sh sourced by the entrypoint under
dash; ``/ready``, then the real texts of the real PP-OCRv4 models on ``/ocr``; ``podman stop`` drains a request in
flight and the server exits 0 within the grace period. The server starts with every proxy variable pointing at a
recorder on the container's loopback, and the recorder sees no connection while it answers (no download, no
telemetry: the image's egress). ``doctor``, ``convert`` and ``selftest --runtime reference`` run in the image too.

scripts/ci-container.sh builds the image and runs this file; without podman or the image it is skipped."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Dict, Iterator, List

import pytest
import yaml

from paddlex_npu.samples import assets
from tests.deploy.test_entrypoint import SET_ENV
from tests.helpers import ENGLISH, PAGE, norm

IMAGE = os.environ.get("PADDLEX_NPU_TEST_IMAGE", "localhost/paddlex-npu:cpu")
UID = GID = 1000  # the image's APP_UID / APP_GID
GRACE = 30  # podman stop --time: the pod's terminationGracePeriodSeconds
MODELS = (assets.DET, assets.REC)
pytestmark = pytest.mark.skipif(
    shutil.which("podman") is None, reason="podman is not installed: scripts/ci-container.sh installs it and runs this"
)


@pytest.fixture(scope="module")
def podman(tmp_path_factory) -> List[str]:
    """podman as containers.md says these machines need it (runc, cgroupfs, no default ulimits); skips without
    the image."""
    conf = tmp_path_factory.mktemp("podman") / "containers.conf"
    conf.write_text("[containers]\ndefault_ulimits = []\n", encoding="utf-8")
    os.environ["CONTAINERS_CONF"] = str(conf)
    cmd = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]
    if subprocess.run([*cmd, "image", "exists", IMAGE], timeout=60).returncode != 0:
        pytest.skip(f"no image {IMAGE}: scripts/ci-container.sh builds it (or set PADDLEX_NPU_TEST_IMAGE)")
    return cmd


def _own(folder: Path) -> Path:
    """Give ``folder`` to the container's user, as a cluster's volume would (ais_bench's path rules)."""
    for p in [folder, *folder.rglob("*")]:
        os.chown(p, UID, GID)
    return folder


@pytest.fixture(scope="module")
def host_dirs(asset_root, tmp_path_factory) -> Dict[str, Path]:
    """The OM packages, the pipeline YAML (model_dirs under /models; results drawn, so the font is used) and a
    bash-syntax set_env.sh where CANN puts nnal/atb's."""
    root = tmp_path_factory.mktemp("container")
    root.chmod(0o755)
    models, sources, config, ascend = (root / n for n in ("models", "sources", "config", "atb"))
    for name in MODELS:
        shutil.copytree(asset_root / "om" / name, models / name)
        (sources / name).mkdir(parents=True)
        for f in ("inference.onnx", "inference.yml"):  # a PaddleX model folder for convert (ONNX form)
            shutil.copy(asset_root / "paddle" / name / f, sources / name / f)
    config.mkdir()
    (config / "pipeline.yaml").write_text(yaml.safe_dump(assets.ocr_pipeline_config(Path("/models"))), "utf-8")
    ascend.mkdir()
    (ascend / "set_env.sh").write_text(SET_ENV, encoding="utf-8")
    return {"models": _own(models), "sources": _own(sources), "config": config, "atb": ascend}


def _hardened(host_dirs: Dict[str, Path]) -> List[str]:
    """The pod's settings: read-only root, no network, every capability dropped, no privilege escalation, the
    writable cache a tmpfs owned by the user, the packages and the config read-only."""
    return [
        "--read-only",
        "--network",
        "none",
        "--cap-drop",
        "all",
        "--security-opt",
        "no-new-privileges",
        "--tmpfs",
        "/var/cache/paddlex-npu:rw,size=512m,mode=0700,U",  # U: the user's, as an emptyDir with fsGroup
        "-v",
        f"{host_dirs['models']}:/models:ro",
        "-v",
        f"{host_dirs['sources']}:/sources:ro",
        "-v",
        f"{host_dirs['config']}:/etc/paddlex-npu:ro",
        "-v",
        f"{host_dirs['atb']}:/usr/local/Ascend/nnal/atb:ro",
    ]


# Runs inside the container before serve (python3 -c): binds an egress-proxy stand-in on the container's loopback,
# then the parent exits (so serve starts only once it listens) and a child logs the first line of every connection
# to the container's log ("proxy-recorder: CONNECT host:443 HTTP/1.1") and answers 403.
_RECORDER = """
import os, socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 3128)); s.listen(16)
if os.fork():
    os._exit(0)
while True:
    c, _ = s.accept()
    c.settimeout(10)
    try:
        line = c.makefile("rb").readline(8192).decode("latin-1").strip()
        c.sendall(b"HTTP/1.1 403 Forbidden\\r\\nContent-Length: 0\\r\\nConnection: close\\r\\n\\r\\n")
    except OSError:
        line = ""
    c.close()
    print("proxy-recorder:", line or "(a connection that sent no request line)", file=sys.stderr, flush=True)
"""
RECORDED = "proxy-recorder:"
PROXY = "http://127.0.0.1:3128"
_PROXY_ENV = [f"{name}={PROXY}" for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy")]
_PROXY_ENV += ["all_proxy=" + PROXY, "NO_PROXY=", "no_proxy="]


@pytest.fixture(scope="module")
def server(podman, host_dirs) -> Iterator[str]:
    """A detached container running serve, with every proxy variable pointing at the recorder; its name. Ready
    once serve prints its URL (read from its log). The entrypoint execs the shell, which execs serve: PID 1."""
    name = f"paddlex-npu-test-{os.getpid()}"
    serve = ["paddlex-npu", "serve", "/etc/paddlex-npu/pipeline.yaml", "--host", "0.0.0.0", "--port", "8080"]
    serve += ["--workers", "1", "--runtime", "reference", "--shutdown-grace", "1"]
    shell = ["sh", "-c", 'python3 -c "$0" && exec "$@"', _RECORDER, *serve]
    proxies = [arg for env in _PROXY_ENV for arg in ("-e", env)]
    subprocess.run([*podman, "rm", "-f", name], capture_output=True, timeout=60)
    started = subprocess.run(
        [*podman, "run", "-d", "--name", name, *proxies, *_hardened(host_dirs), IMAGE, *shell],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert started.returncode == 0, started.stderr
    try:
        _wait_for_log(podman, name, "paddlex-npu serve: http://0.0.0.0:8080", timeout=300)
        yield name
    finally:
        subprocess.run([*podman, "rm", "-f", "-t", "0", name], capture_output=True, timeout=120)


def _wait_for_log(podman: List[str], name: str, line: str, timeout: float) -> None:
    """Follow the container's log until ``line`` (an event, not a poll); fails with the log's tail."""
    logs = subprocess.Popen([*podman, "logs", "-f", name], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: List[str] = []
    timer = threading.Timer(timeout, logs.kill)
    timer.start()
    try:
        for got in logs.stdout:  # ends when the container stops or the timer kills the follower
            seen.append(got)
            if line in got:
                return
    finally:
        timer.cancel()
        logs.kill()
        logs.wait()
    raise AssertionError(f"{name} never logged {line!r} within {timeout:.0f} s:\n{''.join(seen[-40:])}")


# Runs inside the container: GET or POST (the body on stdin) to the server on the container's loopback, directly.
_CLIENT = """
import sys, urllib.request, urllib.error
body = sys.stdin.buffer.read() or None
req = urllib.request.Request("http://127.0.0.1:8080" + sys.argv[1], data=body,
                             headers={"Content-Type": "application/json"})
direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # not through the recorder
try:
    with direct.open(req, timeout=300) as r:
        status, text = r.status, r.read().decode()
except urllib.error.HTTPError as e:
    status, text = e.code, e.read().decode()
print(status)
print(text)
"""


def _call(podman: List[str], name: str, path: str, body: bytes = b"") -> tuple:
    out = subprocess.run(
        [*podman, "exec", "-i", name, "python3", "-c", _CLIENT, path], input=body, capture_output=True, timeout=400
    )
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    status, text = out.stdout.decode().split("\n", 1)
    return int(status), text


def _ocr_body(image: Path) -> bytes:
    return json.dumps({"file": base64.b64encode(image.read_bytes()).decode(), "fileType": 1}).encode()


def _exec(podman: List[str], name: str, *cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run([*podman, "exec", name, *cmd], capture_output=True, text=True, timeout=120)


def test_serve_answers_real_texts_offline_as_non_root_on_a_read_only_root(podman, server, images):
    status, text = _call(podman, server, "/ready")
    assert status == 200, text
    status, text = _call(podman, server, "/ocr", _ocr_body(images["english"]))
    assert status == 200, text[:2000]
    result = json.loads(text)["result"]["ocrResults"][0]
    assert norm(result["prunedResult"]["rec_texts"]) == norm(ENGLISH)
    # the result image, drawn with the image's font: PaddleX would otherwise download one (and fail offline)
    assert base64.b64decode(result["ocrImage"])[:3] == b"\xff\xd8\xff"


def test_the_container_is_what_the_pod_asks_for(podman, server):
    assert _exec(podman, server, "id", "-u").stdout.strip() == str(UID)
    wrote = _exec(podman, server, "touch", "/opt/paddlex-npu/x")
    assert wrote.returncode != 0 and "Read-only file system" in wrote.stderr
    wrote = _exec(podman, server, "touch", "/models/x")
    assert wrote.returncode != 0 and "Read-only file system" in wrote.stderr
    offline = _exec(podman, server, "python3", "-c", "import socket; socket.create_connection(('1.1.1.1', 53), 3)")
    assert offline.returncode != 0 and "Network is unreachable" in offline.stderr
    # PID 1 is the server (the entrypoint exec'd it) with the environment of the bash-syntax set_env.sh
    cmdline = _exec(podman, server, "cat", "/proc/1/cmdline").stdout.split("\0")
    assert "serve" in cmdline and any(c.endswith("paddlex-npu") for c in cmdline), cmdline
    environ = _exec(podman, server, "cat", "/proc/1/environ").stdout.split("\0")
    assert "ATB_HOME_PATH=/usr/local/Ascend/nnal/atb" in environ
    assert _exec(podman, server, "python3", "-c", "import paddle").returncode != 0  # no paddlepaddle in the image


def test_the_server_opened_no_connection_of_its_own(podman, server, images):
    """After a page read, the result image drawn and /metrics: the recorder saw nothing (it does answer: checked
    from inside the container, through the proxy, last)."""
    status, _ = _call(podman, server, "/ocr", _ocr_body(images["english"]))
    assert status == 200
    _call(podman, server, "/metrics")
    log = _logs(podman, server)
    assert RECORDED not in log, [line for line in log.splitlines() if RECORDED in line]
    probe = "import urllib.request as u\ntry: u.urlopen('http://example.invalid/', timeout=10)\nexcept Exception: pass"
    assert _exec(podman, server, "python3", "-c", probe).returncode == 0
    assert f"{RECORDED} GET http://example.invalid/ HTTP/1.1" in _logs(podman, server)


def _logs(podman: List[str], name: str) -> str:
    out = subprocess.run([*podman, "logs", name], capture_output=True, text=True, timeout=60)
    return out.stdout + out.stderr


def test_stop_drains_a_request_in_flight_and_exits_0(podman, server, images):
    """SIGTERM while a page is being read: it is answered, then the server exits 0 well inside the grace."""
    answer: Dict[str, tuple] = {}
    worker = threading.Thread(
        target=lambda: answer.update(page=_call(podman, server, "/ocr", _ocr_body(images["page"])))
    )
    worker.start()
    _wait_in_flight(podman, server)
    start = time.monotonic()
    stopped = subprocess.run([*podman, "stop", "-t", str(GRACE), server], capture_output=True, text=True, timeout=120)
    took = time.monotonic() - start
    worker.join(timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    inspect = [*podman, "inspect", server, "--format", "{{.State.ExitCode}}"]
    assert subprocess.run(inspect, capture_output=True, text=True, timeout=60).stdout.strip() == "0"
    assert took < GRACE, f"podman stop took {took:.1f} s: the grace period ran out (SIGKILL)"
    status, text = answer["page"]
    assert status == 200, text[:2000]
    assert norm(json.loads(text)["result"]["ocrResults"][0]["prunedResult"]["rec_texts"]) == norm(PAGE)


def _wait_in_flight(podman: List[str], name: str, timeout: float = 60) -> None:
    """Until /metrics counts a request in flight (bounded)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        _, text = _call(podman, name, "/metrics")
        for line in text.splitlines():
            if line.startswith("paddlex_npu_requests_in_flight") and float(line.split()[-1]) >= 1:
                return
    raise AssertionError(f"no request in flight within {timeout:.0f} s")


def _run(podman: List[str], host_dirs: Dict[str, Path], *cmd: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*podman, "run", "--rm", *_hardened(host_dirs), IMAGE, *cmd], capture_output=True, text=True, timeout=timeout
    )


def test_doctor_in_the_image_names_what_the_cpu_twin_lacks(podman, host_dirs):
    out = _run(podman, host_dirs, "paddlex-npu", "doctor")
    assert out.returncode == 1, out.stdout + out.stderr  # no NPU, no CANN: required parts missing
    assert "npu-smi is not on PATH" in out.stdout, out.stdout
    # the container line: no chip, no driver mounted, each named with the mount that brings it
    line = next((x for x in out.stdout.splitlines() if x.startswith("[x] container: in a ")), "")
    assert "container; missing: /dev/davinciN (no NPU is mounted)" in line or "container (libpod); missing: " in line
    assert "/dev/davinciN (no NPU is mounted)" in line, out.stdout
    assert "/usr/local/dcmi (the DCMI library npu-smi loads)" in out.stdout


def test_convert_then_selftest_in_the_image(podman, host_dirs):
    """convert writes packages from the ONNX model folders; selftest --runtime reference passes on them."""
    script = " && ".join(
        [f"paddlex-npu convert /sources/{m} -o /var/cache/paddlex-npu/om/{m} --soc-version Ascend310P3" for m in MODELS]
        + ["paddlex-npu selftest --runtime reference --om-root /var/cache/paddlex-npu/om"]
    )
    out = _run(podman, host_dirs, "sh", "-c", script)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "FAIL" not in out.stdout, out.stdout


def test_the_image_label_and_the_installed_package_say_the_one_version(podman, host_dirs):
    """deploy/Dockerfile's org.opencontainers.image.version (VERSION, from paddlex_npu/version.py) is what
    `paddlex-npu --version` and `info` in the image print."""
    from paddlex_npu.version import __version__

    label = subprocess.run(
        [*podman, "image", "inspect", IMAGE, "--format", '{{index .Labels "org.opencontainers.image.version"}}'],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    assert label == __version__
    assert _run(podman, host_dirs, "paddlex-npu", "--version", timeout=120).stdout.strip() == f"paddlex-npu {label}"
    assert f"- paddlex-npu: {label}\n" in _run(podman, host_dirs, "paddlex-npu", "info", timeout=120).stdout
