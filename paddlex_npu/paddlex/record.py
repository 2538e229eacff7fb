"""The patch record: what was patched, with the originals, so that reverting restores the very same objects."""

from __future__ import annotations

import sys
from typing import Any, Callable, Iterator, List, MutableMapping, Tuple

MISSING = object()  # the "original" of an attribute its owner did not have (restored by deleting it)


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
        original = owner.__dict__.get(name, MISSING)
        setattr(owner, name, value)
        self._attributes.append((owner, name, original, value))

        def undo() -> bool:
            if owner.__dict__.get(name, MISSING) is not value:
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
