"""Install the route when PaddleX is imported (at once if it already is): ``import paddlex_npu`` then does not
import PaddleX itself, so the layers that need no PaddleX load fast, and settings PaddleX reads at import time
(fonts, model sources) can still be made after ``import paddlex_npu``. The post-import hook of
OpenTelemetry's auto-instrumentation, in miniature."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Any, Callable, Optional, Sequence

Install = Callable[[], Any]  # the patcher's install, given by the caller (this module imports no patcher)


class _InstallAfterImport(importlib.abc.MetaPathFinder):
    """A one-shot finder: lets ``import paddlex`` run as usual, then installs the route."""

    def __init__(self, install: Install, is_installed: Callable[[], bool]) -> None:
        self._install, self._is_installed = install, is_installed

    def find_spec(self, name: str, path: Optional[Sequence[str]], target: Any = None) -> Any:
        if name != "paddlex":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_install(module: Any) -> None:
            exec_module(module)
            if not self._is_installed():
                self._install()

        spec.loader.exec_module = exec_then_install  # type: ignore[method-assign]
        return spec


def take_pending() -> bool:
    """Drop a pending hook and say whether there was one: the patcher is about to import PaddleX itself, and
    then installs if the hook was waiting for that."""
    pending = any(isinstance(f, _InstallAfterImport) for f in sys.meta_path)
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _InstallAfterImport)]
    return pending


def install_when_paddlex_loads(install: Install, is_installed: Callable[[], bool]) -> None:
    """``install()`` now if PaddleX is loaded, else as soon as it is; nothing when PaddleX is not installed."""
    if "paddlex" in sys.modules:
        if not is_installed():
            install()
    elif importlib.util.find_spec("paddlex") is not None and not any(
        isinstance(f, _InstallAfterImport) for f in sys.meta_path
    ):
        sys.meta_path.insert(0, _InstallAfterImport(install, is_installed))
