"""The host loop of a split model (:mod:`paddlex_npu.om.loop_split`): the encoder once, the decoder step until its
condition is false or the trip count is reached, the tail once. Each part is a callable from named arrays to named
arrays (an OM runner on the route, ONNX Runtime when ``convert`` samples the shapes); every call is one device
call: a 500-step decode is 502 launches, or, with a step package that runs ``spec.unroll`` steps per call
(:mod:`paddlex_npu.build.step_unroll`), about ``500 / unroll`` + 3."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

import numpy as np

from ..errors import ConfigError, InputShapeError
from ..om.loop_split import REMAINING, SCALAR_SUFFIX, STEPS_RUN, LoopSpec

UNBOUNDED = 2**62  # REMAINING when the Loop has no trip count

Part = Callable[[Dict[str, np.ndarray]], Dict[str, np.ndarray]]


def fixed(shape: List[int]) -> Optional[List[int]]:
    """An input's shape when every dim is fixed, else None."""
    return None if -1 in shape else shape


def _as_shape(value: np.ndarray, shape: Optional[List[int]]) -> np.ndarray:
    """A carried value in the step input's shape when it has that many elements (``[]`` as ``[1]``: paddle2onnx's
    bodies change it on the first step, and a runtime may return a 0-d output as ``[1]``)."""
    if shape is None or list(value.shape) == shape or value.size != int(np.prod(shape)):
        return value
    return value.reshape(shape)


def run_split(
    spec: LoopSpec,
    encoder: Part,
    step: Part,
    tail: Part,
    inputs: Dict[str, np.ndarray],
    first: Optional[Part] = None,
) -> Dict[str, np.ndarray]:
    """The model's outputs by name (ONNX's Loop passes the iteration number as an int64 scalar). ``first``: the
    step of the first iteration, whose inputs keep the first values' shapes (``spec.first``)."""
    env = dict(encoder(inputs))
    limit = int(env[spec.trip_count].reshape(-1)[0]) if spec.trip_count else None
    cond = bool(env[spec.cond_init].reshape(-1)[0]) if spec.cond_init else True
    cond_value = env[spec.cond_init] if spec.cond_init else np.array(True)
    values = {c.input: env[c.init] for c in spec.carried}
    if first is None:
        cond_value = _as_shape(cond_value, spec.cond_shape)
        values = {c.input: _as_shape(values[c.input], c.shape) for c in spec.carried}
    scans: Dict[str, List[np.ndarray]] = {s: [] for s, _ in spec.scans}
    i = 0
    while cond and (limit is None or i < limit):
        feeds = {spec.iter_input: np.array(i, dtype=np.int64), spec.cond_input: cond_value, **values}
        feeds.update({n: env[n] for n in spec.outer})
        many = spec.unroll > 1 and not (i == 0 and first is not None)
        if many:  # up to spec.unroll steps in one call, the condition checked in the graph (build/step_unroll.py)
            feeds[REMAINING] = np.array(UNBOUNDED if limit is None else limit - i, dtype=np.int64)
        out = (first if i == 0 and first is not None else step)(feeds)
        cond_value = _as_shape(out[spec.cond_output], spec.cond_shape)
        cond = bool(np.asarray(cond_value).reshape(-1)[0])
        for c in spec.carried:  # a runtime may return a 0-d output as [1]: the step's input shape again
            if c.output is not None:
                values[c.input] = _as_shape(out[c.output], c.shape)
        for s in scans:
            scans[s].append(out[s])
        ran = int(out[STEPS_RUN].reshape(-1)[0]) if many else 1
        if ran < 1:
            break  # no copy ran: the trip count or the condition stopped it before this call
        i += ran
    for c in spec.carried:
        env[c.result] = values[c.input]
    for s, result in spec.scans:
        env[result] = np.stack(scans[s]) if scans[s] else np.zeros((0,), np.float32)
    return tail({n: env[n] for n in spec.tail_inputs})


def recorded_outputs(runner: Any) -> List[str]:
    """A part's outputs by position, named as ``convert`` recorded them in its manifest (the ONNX names the loop
    spec uses). A built OM names its outputs ``"<node>:<index>:<tensor>"`` (correction 32), so the host loop never
    looks an output up by the name the session reports."""
    names = list(runner.manifest.outputs)
    if len(names) != len(runner.output_names):
        raise ConfigError(
            f"{runner.name}: the manifest records {len(names)} outputs, the OM has {len(runner.output_names)}: a part "
            "of a split model needs the output names `paddlex-npu convert` records; rebuild the package"
        )
    return names


class LoopDriver:
    """A split model behind one runner: ``encoder``, ``step`` and ``tail`` are the OM runners of its three
    packages (each call one ``InferSession.infer``). The parts are built for batch 1: a batch runs one image at a
    time and each output is padded with zeros along its decoded-steps axis to the longest (the decoders read an
    item up to its own end token)."""

    def __init__(self, spec: LoopSpec, encoder: Any, step: Any, tail: Any, first: Optional[Any] = None) -> None:
        self.spec, self.encoder, self.step, self.tail, self.first = spec, encoder, step, tail, first

    @staticmethod
    def _named(runner: Any) -> Part:
        names = recorded_outputs(runner)

        def run(feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
            shapes = [spec.shape for spec in runner.manifest.inputs]
            # no copy of a value already in the input's dtype and C order (the last step's output)
            arrays = [
                _as_shape(np.asarray(feeds[n.removesuffix(SCALAR_SUFFIX)], dtype=dt, order="C"), fixed(shape))
                for n, dt, shape in zip(runner.input_names, runner.input_dtypes, shapes)
            ]
            return dict(zip(names, runner.infer(arrays)))

        return run

    def __call__(
        self, feeds: List[np.ndarray], encode: Callable[[List[np.ndarray]], List[np.ndarray]]
    ) -> List[np.ndarray]:
        names = self.encoder.input_names
        encoded, tail_names = recorded_outputs(self.encoder), recorded_outputs(self.tail)

        def enc(named: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
            return dict(zip(encoded, encode([named[n] for n in names])))

        items = []
        for k in range(len(feeds[0])):
            one = {n: f[k : k + 1] for n, f in zip(names, feeds)}
            first = self._named(self.first) if self.first is not None else None
            out = run_split(self.spec, enc, self._named(self.step), self._named(self.tail), one, first)
            items.append([out[n] for n in tail_names])
        if len(items) > 1:
            odd = [n for n, a in zip(tail_names, items[0]) if a.ndim == 0 or a.shape[0] != 1]
            if odd:
                raise InputShapeError(
                    f"{self.encoder.name}: a batch of {len(items)} runs one input at a time through the split model, "
                    f"but its outputs {odd} are not one row per input: give one input at a time (batch_size 1)"
                )
        return [_stack([item[j] for item in items]) for j in range(len(tail_names))]

    def close(self) -> None:
        for part in (self.step, self.tail, self.first):
            if part is not None:
                part.close()


def _stack(arrays: List[np.ndarray]) -> np.ndarray:
    if len(arrays) == 1:
        return arrays[0]
    top = [max(a.shape[d] for a in arrays) for d in range(arrays[0].ndim)]
    padded = [np.pad(a, [(0, 0)] + [(0, t - s) for s, t in zip(a.shape[1:], top[1:])]) for a in arrays]
    return np.concatenate(padded, axis=0)
