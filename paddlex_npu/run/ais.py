"""The real Ascend runtime: ``ais_bench.infer.interface.InferSession``, imported lazily.

The wheels' version string never changes (0.0.2 since 2022) while the API did, so features are detected,
never read from a version. Every ais_bench call makes the session's ACL context current on the calling
thread and leaves it so; like real integrations we save the thread's context and restore it afterwards, so
other ACL users (torch_npu, pyACL) in the same thread keep theirs.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
from typing import Any, Dict, Iterator, List, Union

from ..errors import RuntimeUnavailableError

INSTALL_HINT = (
    "install Ascend's ais_bench and aclruntime wheels for your CANN and Python "
    "(e.g. `pip install aclruntime-0.0.2-cp311-cp311-linux_aarch64.whl ais_bench-0.0.2-py3-none-any.whl`, "
    "from the Ascend tools ais_bench release page) after `source /usr/local/Ascend/ascend-toolkit/set_env.sh`; "
    "or run on the CPU reference runtime: set PADDLEX_NPU_RUNTIME=reference or "
    "backend_config={'runtime': 'reference'}"
)


def load_session_class() -> type:
    """``ais_bench.infer.interface.InferSession`` or a :class:`RuntimeUnavailableError` that says why."""
    try:
        from ais_bench.infer.interface import InferSession
    except ImportError as exc:
        spec = importlib.util.find_spec("ais_bench")
        if spec is not None and importlib.util.find_spec("ais_bench.benchmark") is not None:
            raise RuntimeUnavailableError(
                "the installed `ais_bench` package is AISBench's benchmark tool (ais_bench_benchmark), which "
                "shadows Ascend's ais_bench inference package: `pip uninstall ais_bench_benchmark`, then "
                + INSTALL_HINT
            ) from exc
        raise RuntimeUnavailableError(f"ais_bench is not importable ({exc}): {INSTALL_HINT}") from exc
    return InferSession


def features(session_cls: type) -> Dict[str, bool]:
    """Which API generation the installed ais_bench has."""
    infer_params = inspect.signature(session_cls.infer).parameters
    return {
        "out_array": "out_array" in infer_params,
        "set_context": hasattr(session_cls, "set_context"),
        "free_resource": hasattr(session_cls, "free_resource"),
        "summary": hasattr(session_cls, "summary"),
        "infer_pipeline": hasattr(session_cls, "infer_pipeline"),
    }


@contextlib.contextmanager
def keep_acl_context() -> Iterator[None]:
    """Restore the calling thread's current ACL context after an ais_bench call (no-op without pyACL)."""
    try:
        import acl  # type: ignore[import-not-found]
    except ImportError:
        yield
        return
    context, ret = acl.rt.get_context()
    try:
        yield
    finally:
        if ret == 0 and context:
            acl.rt.set_context(context)


class AisSession:
    """ais_bench's ``InferSession`` behind the :class:`~.session.Session` protocol; its features are detected
    once, so the runner never probes the session."""

    def __init__(self, session: Any) -> None:
        self.raw = session
        self.features = features(type(session))

    def get_inputs(self) -> List[Any]:
        return list(self.raw.get_inputs())

    def get_outputs(self) -> List[Any]:
        return list(self.raw.get_outputs())

    def infer(
        self,
        feeds: list,
        mode: str = "static",
        custom_sizes: Union[int, List[int], None] = 100000,
        out_array: bool = True,
    ) -> List[Any]:
        if self.features["out_array"]:
            return self.raw.infer(feeds, mode=mode, custom_sizes=custom_sizes, out_array=out_array)
        return self.raw.infer(feeds, mode=mode, custom_sizes=custom_sizes)

    def set_custom_outsize(self, custom_sizes: List[int]) -> None:
        self.raw.set_custom_outsize(custom_sizes)

    def free_resource(self) -> None:
        if self.features["free_resource"]:
            self.raw.free_resource()


def open_session(om_path: str, device_id: int, **options: Any) -> AisSession:
    session_cls = load_session_class()
    return AisSession(session_cls(device_id, om_path, **options))
