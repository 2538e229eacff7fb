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
    "unset (PaddleX downloads a font)",
    "PaddleX's own: the TTF font PaddleX draws result images with. Set it offline, e.g. to "
    "`/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf`; the samples' environment does.",
    read_by="PaddleX",
)
PDX_SOURCE_CHECK = EnvVar(
    "PADDLE_PDX_DISABLE_MODEL_SOURCE_CHECK",
    "`False`",
    "PaddleX's own: `True` skips PaddleX's check of its model hosters at import (offline machines).",
    read_by="PaddleX",
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
    LOG_FORMAT,
    LOG_LEVEL,
    API_TOKENS,
    METRICS_TOKENS,
    PDX_FONT,
    PDX_SOURCE_CHECK,
)


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


def markdown_table() -> str:
    """The table of ``docs/environment.md``."""
    rows = ["| Variable | Read by | Default | Meaning |", "| --- | --- | --- | --- |"]
    rows += [f"| `{v.name}` | {v.read_by} | {v.default} | {v.meaning} |" for v in VARIABLES]
    return "\n".join(rows)
