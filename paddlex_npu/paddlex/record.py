"""The one patch type of paddlex-npu and its record. A :class:`Patch` (the shape of OpenTelemetry's
instrumentors) says what it ``requires`` of PaddleX and how it ``apply``-s itself into a :class:`PatchRecord`;
:class:`Applied` applies it once (refused with a message naming what is missing), again idempotently, and
reverts it to the very same objects. The route's patch (each PaddleX generation's adapter), the serving patches
(decoders, fetchers) and PaddleX's serving app (:mod:`.serving`) are patches of this one type."""

from __future__ import annotations

import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, Callable, Iterator, List, MutableMapping, Optional, Tuple

from ..errors import UnsupportedPaddlexError

MISSING = object()  # the "original" of an attribute its owner did not have (restored by deleting it)


class Patch(ABC):
    """One change to PaddleX: what it requires, how it applies (every change recorded), reverted by its record."""

    name: str

    @abstractmethod
    def requires(self) -> List[str]:
        """What this patch assumes of PaddleX that the installed one lacks (empty: it applies)."""

    @abstractmethod
    def apply(self, record: PatchRecord) -> None:
        """Patch PaddleX, recording every change in ``record`` so that it can be reverted exactly."""


class Applied:
    """A :class:`Patch` applied (or not): :meth:`apply` checks ``requires`` first and refuses an unknown layout
    naming what is missing, replaces an earlier application of the same patch, and leaves nothing behind when
    ``apply`` fails; :meth:`revert` restores every object. Thread-safe."""

    def __init__(self, patch: Patch, fix: str = "install a tested PaddleX (docs/compatibility.md)") -> None:
        self.patch, self.fix = patch, fix
        self.record: Optional[PatchRecord] = None
        self._lock = threading.RLock()

    def apply(self) -> None:
        with self._lock:
            missing = self.patch.requires()
            if missing:
                raise UnsupportedPaddlexError(
                    f"{self.patch.name}: this PaddleX lacks {'; '.join(missing)}: unknown layout, not patched: "
                    f"{self.fix}"
                )
            self.revert()
            record = PatchRecord()
            try:
                self.patch.apply(record)
            except BaseException:
                record.revert()
                raise
            self.record = record

    def revert(self) -> List[str]:
        """Undo the patch; a note for each entry someone else replaced meanwhile (left in place)."""
        with self._lock:
            record, self.record = self.record, None
            return record.revert() if record is not None else []

    def attributes(self) -> List[Tuple[Any, str, Any, Any]]:
        record = self.record
        return record.attributes() if record is not None else []


def _own(owner: Any, name: str) -> Any:
    """The value ``owner`` itself holds for ``name`` (its ``__dict__``, or its slot), or :data:`MISSING`."""
    namespace = getattr(owner, "__dict__", None)
    if isinstance(namespace, Mapping):  # a module's or an instance's dict, a class's mappingproxy
        return namespace.get(name, MISSING)
    return getattr(owner, name, MISSING)


class PatchRecord:
    """Applies attribute/item replacements and undoes them in reverse order.

    A patched attribute is restored only while it still holds our replacement; if someone patched on top of
    us, their object is left in place (and the case is reported by :meth:`revert`'s return value).
    """

    def __init__(self) -> None:
        self._undo: List[Callable[[], bool]] = []
        self._attributes: List[Tuple[Any, str, Any, Any]] = []
        self._items: List[Tuple[MutableMapping, Any, Any, Any]] = []

    def attributes(self) -> List[Tuple[Any, str, Any, Any]]:
        """(owner, name, original, replacement) of every attribute replaced with :meth:`set_attr`."""
        return list(self._attributes)

    def items(self) -> List[Tuple[MutableMapping, Any, Any, Any]]:
        """(mapping, key, original, replacement) of every item set with :meth:`set_item`."""
        return list(self._items)

    def set_attr(self, owner: Any, name: str, value: Any) -> None:
        original = _own(owner, name)
        setattr(owner, name, value)
        self._attributes.append((owner, name, original, value))

        def undo() -> bool:
            if _own(owner, name) is not value:
                return False
            if original is MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
            return True

        self._undo.append(undo)

    def set_everywhere(self, original: Any, value: Any) -> List[Tuple[Any, str]]:
        """Replace ``original`` by ``value`` wherever a loaded module binds it at module level (``from x import
        f`` makes an alias that patching ``x.f`` alone misses); returns the (module, name) pairs patched.

        Reverting sweeps the loaded modules again and puts ``original`` back wherever ``value`` is bound, so an
        alias made after install (a module imported later binds ``value``) is restored too."""
        found = [(module, name) for module, name, bound in _module_globals() if bound is original]
        for module, name in found:
            setattr(module, name, value)
            self._attributes.append((module, name, original, value))

        def undo() -> bool:
            for module, name, bound in _module_globals():
                if bound is value:
                    setattr(module, name, original)
            return all(module.__dict__.get(name, MISSING) is original for module, name in found)

        self._undo.append(undo)
        return found

    def set_item(self, mapping: MutableMapping, key: Any, value: Any) -> None:
        original = mapping.get(key, MISSING)
        mapping[key] = value
        self._items.append((mapping, key, original, value))

        def undo() -> bool:
            if mapping.get(key, MISSING) is not value:
                return False
            if original is MISSING:
                del mapping[key]
            else:
                mapping[key] = original
            return True

        self._undo.append(undo)

    def on_revert(self, fn: Callable[[], Any]) -> None:
        self._undo.append(lambda: fn() is not False)

    def on_apply_and_revert(self, fn: Callable[[], Any]) -> None:
        fn()
        self.on_revert(fn)

    def revert(self) -> List[str]:
        """Undo everything; returns a note for each patch that could not be restored."""
        problems = []
        self._attributes.clear()
        self._items.clear()
        while self._undo:
            undo = self._undo.pop()
            if not undo():
                problems.append(getattr(undo, "__qualname__", repr(undo)))
        return problems


def _module_globals() -> Iterator[Tuple[Any, str, Any]]:
    """(module, name, value) of every module-level binding of every loaded module (read from ``__dict__``, so
    lazy modules' ``__getattr__`` is never triggered)."""
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if isinstance(namespace, dict):
            for name, bound in list(namespace.items()):
                yield module, name, bound
