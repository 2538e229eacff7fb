"""Faults and overload on a real ``paddlex-npu serve`` over loopback (issue 21): prints requests, failures,
latencies and peak RSS of the server (parent + workers) for each scenario, with the machine's load.

- ``abandon``: ``--clients`` clients that give up after ``--client-timeout`` s and resend, for ``--seconds``;
  then how soon a fresh request is answered, and how long a SIGTERM takes;
- ``kill``: ``--clients`` clients for ``--seconds`` while one worker is killed (``kill -9``) a third of the way in;
- ``bombs``: a 30000 x 30000 PNG (a few hundred KB) and a PDF of 12 huge blank pages, four of each at once.

    python benchmarks/serve_faults.py [--workers 2] [--runtime reference] [--scenarios abandon,kill,bombs]
"""

from __future__ import annotations

import argparse
import base64
import http.client
import io
import json
import os
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Tuple

import yaml

from paddlex_npu.samples import assets


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid: int) -> List[int]:
    out: List[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(k) for k in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def _rss_mib(pid: int) -> float:
    total = 0
    for p in [pid, *_children(pid)]:
        try:
            for line in open(f"/proc/{p}/status"):
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


class Server:
    def __init__(self, pipeline: Path, workdir: Path, workers: int, runtime: str, *extra: str) -> None:
        self.port = _port()
        env = dict(os.environ, PADDLEX_NPU_RUNTIME=runtime)
        cmd = [sys.executable, "-m", "paddlex_npu.cli", "serve", str(pipeline), "--port", str(self.port)]
        cmd += ["--workers", str(workers), *extra]
        self.log = workdir / f"serve-{self.port}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        end = time.monotonic() + 300
        while self.get("/ready")[0] != 200:
            if self.proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError(f"the server did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.5)
        self.peak = _rss_mib(self.proc.pid)
        self._sampling = True
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while self._sampling and self.proc.poll() is None:
            self.peak = max(self.peak, _rss_mib(self.proc.pid))
            time.sleep(0.05)

    def get(self, path: str) -> Tuple[int, str]:
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
            c.request("GET", path)
            r = c.getresponse()
            return r.status, r.read().decode()
        except OSError:
            return 0, ""

    def post(self, body: bytes, timeout: float = 120) -> Tuple[int, float]:
        t0 = time.monotonic()
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
            c.request("POST", "/ocr", body=body, headers={"Content-Type": "application/json"})
            status = c.getresponse().status
            c.close()
        except (OSError, http.client.HTTPException):
            status = -1  # timed out on the client side, or reset
        return status, time.monotonic() - t0

    def stop(self) -> Tuple[int, float]:
        self._sampling = False
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(120)
        return code, time.monotonic() - t0


def _summary(name: str, results: List[Tuple[int, float]], extra: Dict) -> None:
    ok = [t for s, t in results if s == 200]
    by_status: Dict[str, int] = {}
    for s, _ in results:
        by_status[str(s) if s > 0 else "client-timeout"] = by_status.get(str(s) if s > 0 else "client-timeout", 0) + 1
    q = statistics.quantiles(ok, n=20) if len(ok) >= 20 else sorted(ok)
    print(
        json.dumps(
            {
                "scenario": name,
                "requests": len(results),
                "by_status": by_status,
                "ok_p50_ms": round(1000 * statistics.median(ok), 1) if ok else None,
                "ok_p95_ms": round(1000 * q[-1], 1) if ok else None,
                "all_p50_ms": round(1000 * statistics.median(t for _, t in results), 1) if results else None,
                **extra,
            }
        ),
        flush=True,
    )


def _load(server: Server, body: bytes, clients: int, seconds: float, timeout: float, at=None) -> List:
    results: List[Tuple[int, float]] = []
    end = time.monotonic() + seconds

    def client() -> None:
        while time.monotonic() < end:
            results.append(server.post(body, timeout))

    with ThreadPoolExecutor(clients + 1) as pool:
        jobs = [pool.submit(client) for _ in range(clients)]
        if at is not None:
            time.sleep(seconds / 3)
            at()
        for j in jobs:
            j.result()
    return results


def png_bomb(side: int) -> bytes:
    comp = zlib.compressobj(9)
    row = b"\x00" + b"\xff" * side
    data = b"".join(comp.compress(row) for _ in range(side)) + comp.flush()

    def chunk(kind: bytes, payload: bytes) -> bytes:
        return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))

    ihdr = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", data) + chunk(b"IEND", b"")


def pdf_bomb(pages: int) -> bytes:
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument.new()
    for _ in range(pages):
        doc.new_page(14400, 14400)
    out = io.BytesIO()
    doc.save(out)
    return out.getvalue()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--runtime", default="reference", choices=("reference", "simulated"))
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--client-timeout", type=float, default=1.0)
    p.add_argument("--scenarios", default="abandon,kill,bombs")
    p.add_argument("--max-queue", type=int, help="the server's --max-queue (default: its own)")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="paddlex-npu-serve-faults-"))
    root = assets.build_model_folders()
    config = assets.ocr_pipeline_config(Path(root) / "om")
    config["Serving"] = {"visualize": False}
    pipeline = work / "ocr.yaml"
    pipeline.write_text(yaml.safe_dump(config))
    page = assets.render_text_image(
        ["Serving that survives", "dead workers replaced", "queues bounded"], work / "p.png"
    )
    body = json.dumps({"file": base64.b64encode(page.read_bytes()).decode(), "fileType": 1}).encode()
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()} (shared with other work)", flush=True)
    scenarios = args.scenarios.split(",")

    queue = ["--max-queue", str(args.max_queue)] if args.max_queue is not None else []
    if "abandon" in scenarios:
        s = Server(pipeline, work, args.workers, args.runtime, *queue)
        base = s.peak
        results = _load(s, body, args.clients, args.seconds, args.client_timeout)
        t0 = time.monotonic()
        fresh = s.post(body)
        recovered = time.monotonic() - t0
        peak = s.peak
        code, stop_s = s.stop()
        answered_in_time = sum(1 for st, t in results if st == 200 and t <= args.client_timeout)
        _summary(
            "abandon",
            results,
            {
                "clients": args.clients,
                "max_queue": args.max_queue,
                "answered_in_time": answered_in_time,
                "rss_mib_idle": round(base),
                "rss_mib_peak": round(peak),
                "fresh_request_status": fresh[0],
                "fresh_request_s": round(recovered, 2),
                "sigterm_exit": code,
                "sigterm_s": round(stop_s, 2),
            },
        )

    if "kill" in scenarios:
        s = Server(pipeline, work, args.workers, args.runtime)
        victim = next(k for k in _children(s.proc.pid) if b"spawn_main" in open(f"/proc/{k}/cmdline", "rb").read())
        killed_at: List[float] = []

        def kill() -> None:
            os.kill(victim, signal.SIGKILL)
            killed_at.append(time.monotonic())

        try:
            results = _load(s, body, 8, args.seconds, 120, at=kill)
        except BaseException:
            s.stop()
            raise
        end = time.monotonic() + 120
        while s.get("/ready")[0] != 200 and time.monotonic() < end:
            time.sleep(0.2)
        ready_after = time.monotonic() - killed_at[0]
        code, _ = s.stop()
        _summary("kill", results, {"clients": 8, "ready_again_s_after_kill": round(ready_after, 1), "exit": code})

    if "bombs" in scenarios:
        s = Server(pipeline, work, args.workers, args.runtime)
        for name, data, ftype in (("png-30000x30000", png_bomb(30000), 1), ("pdf-12-huge-pages", pdf_bomb(12), 0)):
            time.sleep(1)
            base = _rss_mib(s.proc.pid)
            s.peak = base
            bomb = json.dumps({"file": base64.b64encode(data).decode(), "fileType": ftype}).encode()
            with ThreadPoolExecutor(4) as pool:
                results = list(pool.map(s.post, [bomb] * 4))
            _summary(
                name,
                results,
                {"file_bytes": len(data), "rss_mib_before": round(base), "rss_mib_extra_peak": round(s.peak - base)},
            )
        s.stop()


if __name__ == "__main__":
    main()
