"""``paddlex-npu triton-serve`` supervises ``tritonserver``: Triton's Python backend does not restart a model
instance whose stub process died (killed, out of memory); every request routed to it then fails ("Stub process
is not healthy") while ``/v2/health/ready`` still answers 200.

The watchdog lists the stub processes of the server (``triton_python_backend_stub <repo>/<model>/<version>/model.py
... <instance>``) every ``interval`` seconds. When one disappears while the server runs, it unloads that model
and loads it again through Triton's model control API (``POST /v2/repository/models/<model>/unload`` then
``.../load``, which need ``--model-control-mode=explicit``): while it is unloaded, ``/v2/models/<model>/ready``
and ``/v2/health/ready`` fail (Triton answers 400), so a load balancer sends elsewhere until fresh instances have
loaded (with ``model_warmup``); the model's other instances stop serving meanwhile, and requests that still come
get 404 "unknown model" instead of 500 "Stub process is not healthy". If the reload fails, or the restart budget
(:class:`~..executor.pool.RestartBudget`: so many reloads per time window) is spent, the model stays unloaded.
A model instance whose device context is lost tells the watchdog first, through the
Unix socket named by ``$PADDLEX_NPU_TRITON_WATCHDOG`` (:func:`listen`): the watchdog unloads the model and
answers ``down``, and only then does the instance send its answers and exit (:mod:`.model`), so that a client
that reads the loss's 503 finds the model not ready. Each event is reported through ``say``.
"""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import threading
import time
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

from .. import envs
from ..executor.pool import RestartBudget

STUB = "triton_python_backend_stub"
DEFAULT_RELOADS = 4  # model reloads per restart window (a device that keeps failing is then given up)


@dataclass(frozen=True)
class Stub:
    pid: int
    model: str
    instance: str


def stubs_of(server_pid: int) -> Dict[int, Stub]:
    """The Python backend stubs that are children of ``server_pid`` (Linux ``/proc``)."""
    out: Dict[int, Stub] = {}
    try:
        kids = []
        for task in Path(f"/proc/{server_pid}/task").iterdir():
            kids += (task / "children").read_text().split()
    except OSError:
        return out
    for kid in kids:
        try:
            argv = Path(f"/proc/{kid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not argv or not argv[0].endswith(STUB.encode()) or len(argv) < 9:
            continue
        model_py = Path(argv[1].decode(errors="replace"))
        instance = argv[8].decode(errors="replace")
        out[int(kid)] = Stub(int(kid), model_py.parent.parent.name, instance)
    return out


class StubWatchdog:
    """Watches the stubs of ``server_pid`` and reloads a model that lost one (see the module docstring)."""

    def __init__(
        self,
        server_pid: int,
        http_address: Tuple[str, int],
        say: Callable[[str], None],
        interval: float = 0.5,
        can_reload: bool = True,
        load_timeout: float = 600.0,
        restarts: Optional[RestartBudget] = None,
        listener: Optional[socket.socket] = None,
    ) -> None:
        self.server_pid, self.address, self.say = server_pid, http_address, say
        self.listener = listener  # bound and listening (:func:`listen`): device-lost notices of the instances
        self._down: set = set()  # models unloaded here until their reload
        self._down_lock = threading.Lock()
        self.interval, self.can_reload, self.load_timeout = interval, can_reload, load_timeout
        self.restarts = restarts or RestartBudget(DEFAULT_RELOADS)
        self.reloads = 0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="paddlex-npu-triton-watchdog", daemon=True)
        self._thread.start()
        if self.listener is not None:
            threading.Thread(target=self._serve, name="paddlex-npu-triton-notices", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _request(self, method: str, path: str, timeout: float) -> Tuple[int, str]:
        conn = http.client.HTTPConnection(*self.address, timeout=timeout)
        try:
            conn.request(method, path, body=b"" if method == "POST" else None)
            r = conn.getresponse()
            return r.status, r.read().decode(errors="replace")
        finally:
            conn.close()

    def _ready(self) -> bool:
        try:
            return self._request("GET", "/v2/health/ready", 5)[0] == HTTPStatus.OK
        except OSError:
            return False

    def _run(self) -> None:
        while not self._stop.wait(self.interval):  # watch once the server is ready (every model loaded)
            if self._ready():
                break
        known: Dict[int, Stub] = stubs_of(self.server_pid)
        retiring: set = set()  # stubs of a model's previous instances, which exit after its reload
        while not self._stop.wait(self.interval):
            now = {pid: s for pid, s in stubs_of(self.server_pid).items() if pid not in retiring}
            if self._stop.is_set():
                return
            dead = [s for pid, s in known.items() if pid not in now]
            known = now
            for model in sorted({s.model for s in dead}):
                lost = ", ".join(f"{s.instance} (pid {s.pid})" for s in dead if s.model == model)
                retiring |= {pid for pid, s in known.items() if s.model == model}
                self._recover(model, lost)
                known = {pid: s for pid, s in stubs_of(self.server_pid).items() if pid not in retiring}

    def _serve(self) -> None:
        """Answer device-lost notices (one JSON line: model, instance, pid) until stopped: the model is made not
        ready (unloaded), then ``down`` is answered; ``up`` when it cannot be (no model control)."""
        assert self.listener is not None
        self.listener.settimeout(self.interval)
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with conn:
                self._notice(conn)

    def _notice(self, conn: socket.socket) -> None:
        """One device-lost notice: the model made not ready, then ``down`` (or ``up``) answered."""
        try:
            conn.settimeout(10)
            notice = json.loads(conn.makefile("rb").readline() or b"{}")
            model, instance, pid = str(notice["model"]), notice.get("instance"), notice.get("pid")
            why = f"the instance {instance} (pid {pid}) of model {model!r} lost its device"
            down = self.can_reload and self._mark_down(model, why)
            conn.sendall(b"down\n" if down else b"up\n")
        except (OSError, ValueError, KeyError, TypeError):
            return

    def _mark_down(self, model: str, why: str = "") -> bool:
        """Unload ``model`` (its readiness and the server's fail) until :meth:`_recover` loads it again; True once
        it is unloaded (at once when it already was)."""
        with self._down_lock:
            if model in self._down:
                return True
            self._down.add(model)
        if why:
            self.say(f"triton-serve: {why}; unloading {model!r} until it is reloaded, so that it answers not ready")
        try:
            status, text = self._request("POST", f"/v2/repository/models/{model}/unload", 60)
        except OSError as exc:
            status, text = 0, str(exc)
        if status != HTTPStatus.OK:
            self.say(f"triton-serve: unloading {model!r} failed ({status} {text.strip()[:300]})")
            with self._down_lock:
                self._down.discard(model)
            return False
        return True

    def _recover(self, model: str, lost: str) -> None:
        if self._stop.is_set():
            return
        if not self.can_reload:
            self.say(
                f"triton-serve: the Python stub of model {model!r}, instance {lost}, died; requests to that instance "
                "fail until the model is reloaded (with --poll, touch its config.pbtxt; without --poll this "
                "watchdog reloads it)"
            )
            return
        if not self.restarts.take():
            budget = f"{self.restarts.limit} per {self.restarts.window:g} s"
            return self._unload(
                model,
                f"the Python stub of model {model!r}, instance {lost}, died and the restart "
                f"budget ({budget}, --restart-limit) is spent",
            )
        self.say(
            f"triton-serve: the Python stub of model {model!r}, instance {lost}, died; reloading {model!r} (unloaded "
            "first: not ready until it is back)"
        )
        self._mark_down(model)
        t0 = time.monotonic()
        try:
            status, text = self._request("POST", f"/v2/repository/models/{model}/load", self.load_timeout)
        except OSError as exc:
            status, text = 0, str(exc)
        if self._stop.is_set():
            return
        if status == HTTPStatus.OK:
            with self._down_lock:
                self._down.discard(model)
            self.reloads += 1
            self.say(f"triton-serve: {model!r} reloaded in {time.monotonic() - t0:.1f} s; it is ready again")
            return
        self._unload(model, f"reloading {model!r} failed ({status} {text.strip()[:300]})")

    def _unload(self, model: str, why: str) -> None:
        """Unload ``model`` so that its readiness (and the server's) fails, saying why."""
        self.say(
            f"triton-serve: {why}; unloading {model!r}, so that its readiness fails and load balancers stop "
            f"sending: fix the cause and load it again (POST /v2/repository/models/{model}/load) or restart the "
            "server"
        )
        try:
            self._request("POST", f"/v2/repository/models/{model}/unload", 60)
        except OSError:
            pass


def _drained(proc: Any, seconds: float = 2.0) -> bool:
    """``tritonserver`` is shutting down and none of its stubs has run for ``seconds``: every instance that can
    stop has stopped (what remains is the instance whose stub died)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if proc.poll() is not None or stubs_of(proc.pid):
            return False
        time.sleep(0.2)
    return True


def listen() -> Tuple[socket.socket, str]:
    """A listening Unix socket for device-lost notices, in a fresh private folder; its path goes to the model
    instances as ``$PADDLEX_NPU_TRITON_WATCHDOG``."""
    import tempfile

    path = str(Path(tempfile.mkdtemp(prefix="paddlex-npu-triton-")) / "watchdog.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.listen(16)
    return sock, path


def run_supervised(
    argv: list,
    env: Dict[str, str],
    http_address: Tuple[str, int],
    say: Callable[[str], None],
    can_reload: bool = True,
    restarts: Optional[RestartBudget] = None,
) -> int:
    """Run ``tritonserver`` (``argv``) as a child with the watchdog; SIGTERM / SIGINT are passed on to it (it
    drains); returns its exit code."""
    import signal
    import subprocess

    listener, path = listen() if can_reload else (None, "")
    if listener is not None:
        env = {**env, envs.TRITON_WATCHDOG.name: path}
    proc = subprocess.Popen(argv, env=env)
    watchdog = StubWatchdog(proc.pid, http_address, say, can_reload=can_reload, restarts=restarts, listener=listener)

    def forward(sig: int, frame: object) -> None:
        watchdog._stop.set()  # a stub that exits during the shutdown is no fault
        if proc.poll() is None:
            proc.send_signal(sig)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    watchdog.start()
    try:
        while True:
            try:
                return proc.wait(1.0)
            except subprocess.TimeoutExpired:
                pass
            if watchdog._stop.is_set() and watchdog.reloads and _drained(proc):
                say(
                    "triton-serve: every model instance has stopped; tritonserver still waits for the instance whose "
                    "stub died (Triton's Python backend never releases it): stopping tritonserver"
                )
                proc.kill()
                proc.wait()
                return 0
    finally:
        watchdog.stop()
        for s, handler in previous.items():
            signal.signal(s, handler)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if listener is not None:
            listener.close()
            shutil.rmtree(Path(path).parent, ignore_errors=True)
