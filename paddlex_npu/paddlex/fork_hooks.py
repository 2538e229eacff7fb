"""Entry points called from inside a fork-patched PaddleX (see ``patches/`` and ``paddlex-npu patch``).

A patched PaddleX routes to the OM runner from its own source, with no ``import paddlex_npu`` in user code.
The routing is the same code the monkeypatch adapters use: these functions only forward to them. What the
source does not do itself (3.5+: the ``om`` engine and its bindings; every generation: the route's speed-ups) is
applied once per process by :func:`.patcher.enable_fork`, into a record kept for the process
(``docs/fork-patches.md``, ``docs/patch-ledger.md``).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from .patcher import enable_fork


def route_create_predictor(arguments: Dict[str, Any]) -> Optional[Tuple[Any, Any, Any, Any, Any]]:
    """PaddleX 3.5+ ``create_predictor``: (device, engine, engine_config, use_hpip, hpi_config) for the OM
    route, or None to go on unchanged."""
    from .paddlex_35 import ADAPTER

    enable_fork(ADAPTER)
    replace = ADAPTER.route(dict(arguments))
    if replace is None:
        return None
    return tuple(replace[k] for k in ("device", "engine", "engine_config", "use_hpip", "hpi_config"))


def legacy_om_route(predictor: Any, use_hpip: Any, hpi_config: Any, device: Any) -> Any:
    """PaddleX 3.0-3.4 ``BasePredictor.__init__``: mark the predictor for the OM route (or not)."""
    from .paddlex_34 import mark_route

    return mark_route(predictor, use_hpip, hpi_config, device)


def legacy_static_infer(predictor: Any) -> Any:
    """PaddleX 3.0-3.4 ``create_static_infer``: the OM runner, or None for PaddleX's own."""
    from .paddlex_34 import ADAPTER, om_static_infer

    infer = om_static_infer(predictor)
    if infer is not None:
        enable_fork(ADAPTER)  # the speed-ups of the runner's outputs and steps (CTC decode, host steps, tables)
    return infer
