"""Device memory in use, asked of ACL as on a box.

pyACL ``free, total, ret = acl.rt.get_mem_info(attr)`` (``aclrtGetMemInfo(aclrtMemAttr attr, size_t *free,
size_t *total)``, CANN ``acl_rt.h``; the pyACL reference page "aclrtGetMemInfo"): the free and total bytes of the
calling thread's current device for memory of kind ``attr``, system reserve excluded. The figure is device-wide
(every process on the device), not this process's: ``npu-smi info`` is what lists memory per process.

``aclrtMemAttr`` (``acl_rt.h``): ``ACL_DDR_MEM`` 0, ``ACL_HBM_MEM`` 1 (huge and normal pages). Chips with HBM
(910, 910B) answer ``ACL_HBM_MEM``; the 310 series have DDR only, where the HBM query answers a total of 0 or an
error, and ``ACL_DDR_MEM`` is asked instead.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

ACL_DDR_MEM = 0
ACL_HBM_MEM = 1


def _ask(acl: Any, attr: int) -> Optional[Tuple[int, int]]:
    get = getattr(getattr(acl, "rt", None), "get_mem_info", None)
    if get is None:
        return None
    try:
        free, total, ret = get(attr)
    except Exception:  # noqa: BLE001 - a pyACL that cannot answer (no current context, an old CANN) answers nothing
        return None
    return (int(total) - int(free), int(total)) if ret == 0 and total else None


def memory_in_use(acl: Any) -> Optional[Tuple[int, int]]:
    """(bytes in use, total bytes) of the calling thread's device as ``acl`` (pyACL, or the simulated device's
    stand-in) reports them: HBM, else DDR; None where ACL does not answer."""
    if acl is None:
        return None
    return _ask(acl, ACL_HBM_MEM) or _ask(acl, ACL_DDR_MEM)


def process_acl() -> Any:
    """The pyACL this process's sessions use: the simulated device's stand-in where the simulated runtime is
    loaded, else ``import acl`` (None without CANN)."""
    import sys

    simulated = sys.modules.get("paddlex_npu.run.simulated")
    if simulated is not None:
        return simulated.ACL
    try:
        import acl  # type: ignore[import-not-found]
    except ImportError:
        return None
    return acl
