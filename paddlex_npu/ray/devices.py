"""The NPU Ray gave this task or actor, as the device id PaddleX's ``npu:<id>`` takes.

Ray (2.10+) sets ``ASCEND_RT_VISIBLE_DEVICES`` to the chips it assigned before the actor's code runs, so inside
the actor its one chip is device 0 (ids are logical after that variable). With
``RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES`` set Ray leaves the variable alone, and the logical id is the
assigned chip's position in it (or the chip itself when it is unset).
"""

from __future__ import annotations

import os
from typing import List, Optional

from ..errors import ConfigError
from ..run.device_ids import VISIBLE_ENV, visible_devices


def assigned_npus() -> List[str]:
    """The NPU ids Ray assigned to the calling task or actor (physical ids, as Ray lists them)."""
    import ray

    return list(ray.get_runtime_context().get_accelerator_ids().get("NPU", []))


def logical_id(npu: str, visible: Optional[str] = None) -> int:
    """The device id (logical, after ``ASCEND_RT_VISIBLE_DEVICES``) of the chip Ray names ``npu``."""
    if visible is None:
        ids = visible_devices() or []
        visible = os.environ.get(VISIBLE_ENV, "")
    else:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
    if not ids:
        return int(npu)
    if npu not in ids:
        raise ConfigError(
            f"Ray assigned NPU {npu}, which {VISIBLE_ENV}={visible} hides from this process: unset "
            f"{VISIBLE_ENV} in the actor's runtime_env, or let Ray set it (unset "
            "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES)"
        )
    return ids.index(npu)


def assigned_device_id() -> int:
    """The logical device id of the one NPU Ray assigned to the calling actor; a :class:`ConfigError` when it was
    given none or several."""
    npus = assigned_npus()
    if len(npus) != 1:
        shown = "no NPU" if not npus else f"{len(npus)} NPUs ({', '.join(npus)})"
        raise ConfigError(
            f"this Ray actor holds {shown}; each pipeline actor needs exactly one: start it with "
            'resources={"NPU": 1} (Ray Data: map_batches(..., resources={"NPU": 1}); Ray Serve: '
            'ray_actor_options={"resources": {"NPU": 1}}), on a cluster whose nodes declare NPU resources '
            "(ray start --resources '{\"NPU\": 8}', or detected from /dev/davinci*)"
        )
    return logical_id(npus[0])


def require_npus(count: int, what: str) -> None:
    """A :class:`ConfigError` unless the Ray cluster declares at least ``count`` NPUs (asked for more, Ray would
    wait for them without end). Connects to Ray (``ray.init()``) if the caller has not."""
    import ray

    if not ray.is_initialized():
        ray.init()
    total = ray.cluster_resources().get("NPU", 0)
    if total < count:
        raise ConfigError(
            f"{what} needs {count} NPU(s), and the Ray cluster declares {total:g}: start Ray on each Atlas host "
            "with its NPUs detected (`ray status` lists them under Resources) or declared (ray start --resources "
            "'{\"NPU\": 8}'), connect to that cluster (--address / ray.init(address=...)), or ask for fewer"
        )
