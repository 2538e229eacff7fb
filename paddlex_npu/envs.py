"""Every environment variable paddlex-npu reads, in one table: name, default, meaning, and one accessor each.

Modules read the environment only through the accessors here (``envs.runtime()``, not ``os.environ``), and set a
child's environment with the names here (``{envs.RUNTIME.name: "reference"}``). ``docs/environment.md`` holds the
table :func:`markdown_table` writes (a test keeps them equal). An empty value counts as unset.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple


@dataclass(frozen=True)
class EnvVar:
    """One environment variable: its name, its default (as a user reads it) and what it changes."""

    name: str
    default: str
    meaning: str
    read_by: str = "paddlex-npu"

    def get(self) -> Optional[str]:
        """The value set in the environment, stripped; None when unset or empty."""
        value = os.environ.get(self.name, "").strip()
        return value or None


RUNTIME = EnvVar(
    "PADDLEX_NPU_RUNTIME",
    "`ais_bench`",
    "Session runtime when `backend_config` names none: `ais_bench` (the NPU), `reference` (CPU, ONNX Runtime on "
    "the package's `inference.onnx`), `simulated` (CPU outputs with modelled NPU timing).",
)
AUTO_INSTALL = EnvVar(
    "PADDLEX_NPU_AUTO_INSTALL",
    "`1`",
    "`0`: `import paddlex_npu` does not install the route into PaddleX; call `paddlex_npu.install()` yourself.",
)
ALLOW_UNTESTED_PADDLEX = EnvVar(
    "PADDLEX_NPU_ALLOW_UNTESTED_PADDLEX",
    "`0`",
    "`1`: install the route into a PaddleX newer than the tested range (its layout is still checked), at your "
    "own risk. Report what works or fails.",
)
CACHE = EnvVar(
    "PADDLEX_NPU_CACHE",
    "`~/.cache/paddlex_npu`",
    "Cache of the tools: the PIR export environment (`convert --export-env auto`), Triton's Python backend files.",
)
ASSETS = EnvVar(
    "PADDLEX_NPU_ASSETS",
    "`~/.cache/paddlex_npu/assets`",
    "Where `paddlex-npu assets`, the benchmark's defaults and the tests build the sample model folders.",
)
MEMORY_BUDGET = EnvVar(
    "PADDLEX_NPU_MEMORY_BUDGET",
    "`1073741824` (1 GiB)",
    "Bytes of output buffers a model may reserve per session when `backend_config['memory_budget']` is unset.",
)
WORKERS_PER_DEVICE = EnvVar(
    "PADDLEX_NPU_WORKERS_PER_DEVICE",
    "`1`",
    "Worker processes per NPU when a PaddleX pipeline is created on several devices (`device='npu:0,1'`).",
)
SIM_STORE = EnvVar(
    "PADDLEX_NPU_SIM_STORE",
    "`~/.cache/paddlex_npu/simulated`",
    "Replay store of the simulated device (outputs recorded once per model and input).",
)
SIM_LOCKS = EnvVar(
    "PADDLEX_NPU_SIM_LOCKS",
    "`$TMPDIR/paddlex_npu_sim-<uid>`",
    "Lock files of the simulated devices: processes that share this folder share the simulated NPUs.",
)
SIM_DEVICE_LOST = EnvVar(
    "PADDLEX_NPU_SIM_DEVICE_LOST",
    "unset (never)",
    "A fault of the simulated device, for tests: `N` makes the Nth device call of each process, and every later "
    "one, fail as ais_bench does on a lost context (`[-1][ACL: general failure]`, the ACL code 507015 only through "
    "the simulated pyACL's `acl.rt.get_last_error`), which the route raises as `DeviceLostError`; a fresh process "
    "counts from 1 again.",
)
REFERENCE_PRECISION = EnvVar(
    "PADDLEX_NPU_REFERENCE_PRECISION",
    "`fp32`",
    "Numerics of the CPU reference runtime: `fp32` (the ONNX model as it is) or `package` (as ATC builds the "
    "package: with its `precision` fp16, every weight and every operator's output stored in float16, except the "
    "operators its `keep_dtype` names), to preview what fp16 does before the device.",
)
LOG_FORMAT = EnvVar(
    "PADDLEX_NPU_LOG_FORMAT",
    "unset (the library logs nowhere)",
    "`text` or `json`: how a worker process started by `serve` or the executor logs; the CLI sets it from "
    "`--log-format` for the processes it starts (set it yourself only for workers you start).",
)
LOG_LEVEL = EnvVar(
    "PADDLEX_NPU_LOG_LEVEL",
    "`INFO`",
    "The log level of those worker processes, as `--log-level`.",
)
API_TOKENS = EnvVar(
    "PADDLEX_NPU_API_TOKENS",
    "unset (no token needed)",
    "Bearer tokens `serve` and `ray-serve` accept for every path but `/health` and `/ready`, separated by commas "
    "(with `--token-file`): see [the threat model](threat-model.md).",
)
METRICS_TOKENS = EnvVar(
    "PADDLEX_NPU_METRICS_TOKENS",
    "unset (`/metrics` takes the API tokens, open when none is set)",
    "Bearer tokens that open `/metrics` only (with `--metrics-token-file`), for a scraper without OCR rights.",
)
PDX_FONT = EnvVar(
    "PADDLE_PDX_LOCAL_FONT_FILE_PATH",
    "unset: `import paddlex_npu` sets a system font (WenQuanYi, Noto CJK, DejaVu, ...), else PaddleX downloads one",
    "PaddleX's own: the TTF/TTC font PaddleX draws result images with. When it is unset and PaddleX not yet "
    "imported, `import paddlex_npu` points it at a font of the system, or warns once that offline the result "
    "images' texts stay blank (set it, e.g. to `/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf`).",
    read_by="PaddleX",
)
PDX_SOURCE_CHECK = EnvVar(
    "PADDLE_PDX_DISABLE_MODEL_SOURCE_CHECK",
    "`True` (`import paddlex_npu` sets it unless set; PaddleX's own default is `False`)",
    "PaddleX's own: `True` skips PaddleX's connectivity check of its model hosters (no connection at start; "
    "named models still download when asked for). Set `False` to have PaddleX check them.",
    read_by="PaddleX",
)
ORT_TELEMETRY = EnvVar(
    "ORT_DISABLE_TELEMETRY",
    "`1` (`import paddlex_npu` sets it unless set)",
    "ONNX Runtime's own: `1` keeps its telemetry uploader (to `mobile.events.data.microsoft.com`, through any "
    "HTTPS proxy set) from starting; read when onnxruntime is first imported.",
    read_by="ONNX Runtime",
)
HF_TELEMETRY = EnvVar(
    "HF_HUB_DISABLE_TELEMETRY",
    "`1` (`import paddlex_npu` sets it unless set)",
    "huggingface_hub's own (PaddleX can download models through it): `1` sends no usage telemetry.",
    read_by="huggingface_hub",
)
RAY_USAGE = EnvVar(
    "RAY_USAGE_STATS_ENABLED",
    "`0` (`import paddlex_npu` sets it unless set)",
    "Ray's own: `0` sends no usage statistics from a cluster started by a process that imported paddlex-npu.",
    read_by="Ray",
)
# No outbound connection nobody asked for: the libraries' own off switches, each set at `import paddlex_npu`
# unless the environment sets it (a value set wins); worker processes inherit them.
EGRESS_DEFAULTS: Tuple[Tuple[EnvVar, str], ...] = (
    (PDX_SOURCE_CHECK, "True"),
    (ORT_TELEMETRY, "1"),
    (HF_TELEMETRY, "1"),
    (RAY_USAGE, "0"),
)
ASCEND_ROOT = EnvVar(
    "PADDLEX_NPU_ASCEND_ROOT",
    "`/usr/local/Ascend`",
    "Where the image's entrypoint looks for CANN's `set_env.sh` files (toolkit, `cann`, `nnal/atb`); it sources "
    "them with bash, then runs the command.",
    read_by="the image's entrypoint (`deploy/entrypoint.sh`)",
)
# Foreign variables: set by CANN, Ray or a container, read by them and by paddlex-npu; they change what runs.
VISIBLE_DEVICES = EnvVar(
    "ASCEND_RT_VISIBLE_DEVICES",
    "unset (every chip visible)",
    "CANN's: the physical NPUs this process sees, e.g. `4,5`; device ids (`npu:0`) are then logical, counted in "
    "this list (Ray and Kubernetes' Ascend device plugin set it). `doctor` and `selftest` report it.",
    read_by="CANN, paddlex-npu",
)
RAY_NOSET_VISIBLE = EnvVar(
    "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES",
    "unset",
    "Ray's: set, Ray leaves `ASCEND_RT_VISIBLE_DEVICES` alone in its actors, and the NPU Ray assigned is used by "
    "its physical id (`paddlex_npu.ray`).",
    read_by="Ray, paddlex-npu",
)
ASCEND_HOME = EnvVar(
    "ASCEND_HOME_PATH",
    "unset (set by CANN's `set_env.sh`)",
    "CANN's install folder (`ASCEND_TOOLKIT_HOME` is read too); `doctor` reports the CANN environment missing "
    "without either: `source /usr/local/Ascend/ascend-toolkit/set_env.sh`.",
    read_by="CANN, paddlex-npu",
)
ASCEND_TOOLKIT_HOME = EnvVar(
    "ASCEND_TOOLKIT_HOME",
    "unset (set by CANN's `set_env.sh`)",
    "CANN's toolkit folder; as `ASCEND_HOME_PATH` for `doctor`.",
    read_by="CANN, paddlex-npu",
)
LD_LIBRARY_PATH = EnvVar(
    "LD_LIBRARY_PATH",
    "the system's",
    "The dynamic loader's: CANN's `set_env.sh` adds the Ascend libraries that ais_bench loads (`doctor` counts "
    "them); `triton-serve` puts this Python's `libpython` first for tritonserver's Python backend.",
    read_by="the loader, paddlex-npu",
)
KUBERNETES_HOST = EnvVar(
    "KUBERNETES_SERVICE_HOST",
    "unset (set in every pod)",
    "Kubernetes': its presence tells `doctor` it runs in a pod (its `container` line: the devices and host paths "
    "the route needs there).",
    read_by="paddlex-npu (doctor)",
)
RAY_ADDRESS = EnvVar(
    "RAY_ADDRESS",
    "unset (a local Ray, or the latest local cluster)",
    "Ray's: the cluster `ray.init` joins when `--address` is not given; `ray-ocr` and `ray-serve` dial the head it "
    "names first, within `--connect-timeout`, and say what to change when it cannot be reached.",
    read_by="Ray, paddlex-npu (ray-ocr, ray-serve)",
)
PROMETHEUS_MULTIPROC = EnvVar(
    "PROMETHEUS_MULTIPROC_DIR",
    "unset (`serve` sets its own)",
    "prometheus-client's multiprocess folder: `serve` makes a fresh one per server and sets it before its workers "
    "start (they inherit it), then removes it; a value set outside is replaced for that server.",
    read_by="prometheus-client, serve",
)
TRITON_WATCHDOG = EnvVar(
    "PADDLEX_NPU_TRITON_WATCHDOG",
    "unset (`triton-serve` sets it for `tritonserver`)",
    "The Unix socket of `triton-serve`'s watchdog: a Triton model instance whose device is lost tells it there, "
    "so that the model is not ready before the instance answers and exits; set by `triton-serve`, not by hand.",
    read_by="paddlex-npu (Triton models)",
)

VARIABLES: Tuple[EnvVar, ...] = (
    RUNTIME,
    AUTO_INSTALL,
    ALLOW_UNTESTED_PADDLEX,
    CACHE,
    ASSETS,
    MEMORY_BUDGET,
    WORKERS_PER_DEVICE,
    SIM_STORE,
    SIM_LOCKS,
    SIM_DEVICE_LOST,
    REFERENCE_PRECISION,
    LOG_FORMAT,
    LOG_LEVEL,
    API_TOKENS,
    METRICS_TOKENS,
    PDX_FONT,
    PDX_SOURCE_CHECK,
    ORT_TELEMETRY,
    HF_TELEMETRY,
    RAY_USAGE,
    ASCEND_ROOT,
    VISIBLE_DEVICES,
    RAY_NOSET_VISIBLE,
    ASCEND_HOME,
    ASCEND_TOOLKIT_HOME,
    LD_LIBRARY_PATH,
    PROMETHEUS_MULTIPROC,
    KUBERNETES_HOST,
    RAY_ADDRESS,
    TRITON_WATCHDOG,
)


def no_egress() -> Tuple[str, ...]:
    """Set each of :data:`EGRESS_DEFAULTS` the environment leaves unset (before the libraries read them: at
    ``import paddlex_npu``); the names set."""
    unset = tuple((var, value) for var, value in EGRESS_DEFAULTS if var.get() is None)
    for var, value in unset:
        os.environ[var.name] = value
    return tuple(var.name for var, _ in unset)


def runtime() -> Optional[str]:
    """``$PADDLEX_NPU_RUNTIME`` as set (None when unset); the session module checks it and applies the default."""
    return RUNTIME.get()


def auto_install() -> bool:
    return AUTO_INSTALL.get() != "0"


def allow_untested_paddlex() -> bool:
    return ALLOW_UNTESTED_PADDLEX.get() == "1"


def cache_dir() -> Path:
    return Path(CACHE.get() or Path.home() / ".cache" / "paddlex_npu")


def assets_dir() -> Path:
    return Path(ASSETS.get() or Path.home() / ".cache" / "paddlex_npu" / "assets")


def memory_budget() -> Optional[str]:
    """``$PADDLEX_NPU_MEMORY_BUDGET`` as set (None when unset); :mod:`paddlex_npu.run.buffers` parses it."""
    return MEMORY_BUDGET.get()


def workers_per_device() -> str:
    """``$PADDLEX_NPU_WORKERS_PER_DEVICE`` as set, else ``1``; :mod:`paddlex_npu.paddlex.multidevice` checks it."""
    return WORKERS_PER_DEVICE.get() or "1"


def sim_store() -> Path:
    return Path(SIM_STORE.get() or Path.home() / ".cache" / "paddlex_npu" / "simulated")


def sim_locks() -> Path:
    return Path(SIM_LOCKS.get() or Path(tempfile.gettempdir()) / f"paddlex_npu_sim-{os.getuid()}")


def sim_device_lost() -> Optional[int]:
    """``$PADDLEX_NPU_SIM_DEVICE_LOST`` as a call number (None when unset); a value that is no positive integer
    is refused with the fix."""
    value = SIM_DEVICE_LOST.get()
    if value is None:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{SIM_DEVICE_LOST.name}={value!r}: give the device call (1, 2, ...) that loses the device")
    return int(value)


def reference_precision() -> str:
    """``$PADDLEX_NPU_REFERENCE_PRECISION``: ``fp32`` (default) or ``package``; another value is refused."""
    value = REFERENCE_PRECISION.get() or "fp32"
    if value not in ("fp32", "package"):
        raise ValueError(f"{REFERENCE_PRECISION.name}={value!r}: choose fp32 or package")
    return value


def triton_watchdog() -> Optional[str]:
    """``$PADDLEX_NPU_TRITON_WATCHDOG``: the watchdog's socket path (None when unset: no ``triton-serve``)."""
    return TRITON_WATCHDOG.get()


def markdown_table() -> str:
    """The table of ``docs/environment.md``."""
    rows = ["| Variable | Read by | Default | Meaning |", "| --- | --- | --- | --- |"]
    rows += [f"| `{v.name}` | {v.read_by} | {v.default} | {v.meaning} |" for v in VARIABLES]
    return "\n".join(rows)
