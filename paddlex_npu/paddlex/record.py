"""The one patch type of paddlex-npu and its record. A :class:`Patch` (the shape of OpenTelemetry's
instrumentors) says what it ``requires`` of PaddleX and how it ``apply``-s itself into a :class:`PatchRecord`;
:class:`Applied` applies it once (refused with a message naming what is missing), again idempotently, and
reverts it to the very same objects. The route's patch (each PaddleX generation's adapter), the serving patches
(decoders, fetchers) and PaddleX's serving app (:mod:`.serving`) are patches of this one type.

A patch that only replaces attributes is data: :class:`Row` (owner, attribute, wrapper, how an instance is fitted)
and :class:`RowPatch`, whose ``requires`` and ``apply`` are derived from its rows (the route's speed-ups,
:mod:`.speedups`)."""

from __future__ import annotations

import functools
import importlib
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Iterator, List, MutableMapping, Optional, Sequence, Tuple

from ..errors import UnsupportedPaddlexError

MISSING = object()  # the "original" of an attribute its owner did not have (restored by deleting it)
PATCHED_MARK = "__paddlex_npu_patched__"  # set on every replacement (uninstall and the tests read it)


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


def find(spec: str) -> Any:
    """The object ``spec`` names, or :data:`MISSING`: ``"package.module"`` (the module), ``"package.module:Name"``
    (a name of it, ``"A|B"``: the first of them the module has), ``"package.module:Name.attr"`` (an attribute of
    it). Importing the module is the only side effect."""
    module, _, rest = spec.partition(":")
    try:
        found: Any = importlib.import_module(module)
    except ImportError:
        return MISSING
    if not rest:
        return found
    first, *chain = rest.split(".")
    found = next((getattr(found, n) for n in first.split("|") if hasattr(found, n)), MISSING)
    for name in chain:
        found = getattr(found, name, MISSING)
    return found


def fitted(original: Callable[..., Any], fit: Callable[[Any], Any]) -> Callable[..., Any]:
    """A method that fits its instance (``fit(self)``) on the instance's first call, then calls ``original``."""
    name = f"{getattr(fit, '__module__', '')}.{getattr(fit, '__qualname__', 'step')}"
    flag = "_paddlex_npu_fitted_" + name.replace(".", "_").replace("<", "").replace(">", "")  # one flag per fit

    @functools.wraps(original)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not getattr(self, flag, False):
            fit(self)
            setattr(self, flag, True)
        return original(self, *args, **kwargs)

    setattr(method, PATCHED_MARK, True)
    return method


@dataclass(frozen=True)
class Row:
    """One attribute of PaddleX replaced: ``owner`` (a :func:`find` spec: a module, or a class of it) has
    ``attribute`` replaced by ``wrapper(original)`` (marked with :data:`PATCHED_MARK`), and, with ``fit``, each
    instance fitted by ``fit(instance)`` on its first call of it (:func:`fitted`). ``uses``: the other specs of
    PaddleX the wrapper or the fitting reads, checked with the target."""

    owner: str
    attribute: str
    wrapper: Optional[Callable[[Callable[..., Any]], Callable[..., Any]]] = None
    fit: Optional[Callable[[Any], Any]] = None
    uses: Tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.wrapper is None and self.fit is None:
            raise TypeError(f"the row of {self.target} replaces nothing: give it a wrapper, a fit or both")

    @property
    def target(self) -> str:
        return f"{self.owner}.{self.attribute}"

    def missing(self) -> List[str]:
        """What this PaddleX lacks of the row: its target, or what it uses (empty: the row applies)."""
        owner = find(self.owner)
        absent = [self.target] if owner is MISSING or not hasattr(owner, self.attribute) else []
        return absent + [spec for spec in self.uses if find(spec) is MISSING]

    def replacement(self, original: Callable[..., Any]) -> Callable[..., Any]:
        new = self.wrapper(original) if self.wrapper is not None else original
        if self.fit is not None:
            new = fitted(new, self.fit)
        setattr(new, PATCHED_MARK, True)
        return new

    def apply(self, record: PatchRecord) -> None:
        owner = find(self.owner)
        record.set_attr(owner, self.attribute, self.replacement(getattr(owner, self.attribute)))


class RowPatch(Patch):
    """A patch that is its rows: ``requires`` names every target (or what it uses) this PaddleX lacks; ``apply``
    replaces the attribute of each row that this PaddleX has, in order (through :class:`Applied`, only when it has
    them all; :func:`.speedups.apply` switches the missing rows off and applies the rest)."""

    def __init__(self, name: str, rows: Sequence[Row]) -> None:
        self.name, self.rows = name, tuple(rows)

    def requires(self) -> List[str]:
        return [what for row in self.rows for what in row.missing()]

    def apply(self, record: PatchRecord) -> None:
        for row in self.rows:
            if not row.missing():
                row.apply(record)
