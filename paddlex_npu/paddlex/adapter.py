"""The adapter contract: what each PaddleX generation's adapter provides, and the helpers they share.

Everything that differs between PaddleX 3.0-3.4 and 3.5+ sits behind :class:`Adapter`; the patcher, the
fork hooks and the tools ask the adapter of the installed PaddleX and never branch on the generation.
"""

from __future__ import annotations

import functools
import inspect
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from .record import PATCHED_MARK, Patch, PatchRecord


@dataclass(frozen=True)
class ModelEntry:
    """One model of PaddleX's registry, as the NPU route sees it."""

    model: str
    predictor: type  # the predictor class that runs it (its static-model predictor where it has one)
    eligible: bool  # runs a static model, so it can take the OM route
    engines: Tuple[str, ...]  # how PaddleX can run it (3.5+: its engines; 3.0-3.4: paddle_static / paddle_dynamic)


class Adapter(Patch, ABC):
    """One PaddleX generation's hooks, the route's :class:`~.record.Patch` (``requires``: the hook points the
    installed PaddleX lacks; ``apply``: patch it). Subclasses live in ``paddlex_34`` / ``paddlex_35``."""

    name: str

    @abstractmethod
    def is_fork_patched(self) -> bool:
        """Whether this PaddleX carries paddlex-npu's fork patch (routing in its own source)."""

    def fork(self, record: PatchRecord) -> None:  # noqa: B027 - optional hook, empty by default
        """What a fork-patched PaddleX still needs of this adapter at run time, into ``record`` (nothing, unless
        the adapter says otherwise); :func:`.patcher.enable_fork` applies it once per process, with the
        speed-ups."""

    @abstractmethod
    def models(self) -> List[ModelEntry]:
        """Every model of PaddleX's registry, with the one eligibility rule of this generation."""

    def entry(self, model_name: str) -> Optional[ModelEntry]:
        return next((e for e in self.models() if e.model == model_name), None)

    @abstractmethod
    def static_infer_attr(self) -> str:
        """The predictor attribute that holds the static model's callable (``runner`` / ``infer``)."""

    def static_infer_of(self, predictor: Any) -> Any:
        return getattr(predictor, self.static_infer_attr())

    def create_predictor(self, model_name: str, **kwargs: Any) -> Any:
        """PaddleX's ``create_predictor`` (the same call in every generation), for the tools."""
        from paddlex import create_predictor

        return create_predictor(model_name, **kwargs)


def wrap_bound(
    original: Callable[..., Any], body: Callable[[Callable[..., Any], Dict[str, Any], tuple, dict], Any]
) -> Callable[..., Any]:
    """A marked replacement for ``original`` that calls ``body(original, bound, args, kwargs)``, where ``bound``
    maps ``original``'s parameter names to the call's arguments (the wrapper shape all patches share)."""
    signature = inspect.signature(original)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return body(original, signature.bind_partial(*args, **kwargs).arguments, args, kwargs)

    setattr(wrapper, PATCHED_MARK, True)
    return wrapper
