"""``convert`` of a model with a data-dependent ``Loop``: three OM packages driven by a host loop
(:mod:`paddlex_npu.om.loop_split`, :mod:`paddlex_npu.run.loop`).

The parts' shapes are read from one run of the split model on a sample input of the model's fixed shape (ONNX
Runtime, batch 1: the parts are static, the host runs a batch one image at a time), checked against the whole
model's outputs on that input, then declared on each part, so that ONNX shape inference, ATC and the runner see
one shape per input. The tail's outputs (sliced by the step count) are data-dependent: a dymshape OM.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ..errors import ConvertError
from ..om import manifest as mf
from ..om.loop_split import LoopSpec, SplitGraphs, split_loop, vector_scalars
from ..run.loop import run_split

PARTS = ("step", "tail")


@dataclass
class Part:
    """One part's ONNX file and manifest (the encoder's folder is the package's own)."""

    folder: str  # "" (the package), "step", "tail"
    onnx_path: Path
    manifest: mf.OMManifest


def _ort(model: Any) -> Any:
    """``model`` on ONNX Runtime as a part of :func:`paddlex_npu.run.loop.run_split` (named arrays in and out)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3  # paddle2onnx's stale annotations: a warning per step otherwise
    sess = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    wanted = {i.name for i in sess.get_inputs()}

    def run(feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        return dict(zip(names, sess.run(None, {k: v for k, v in feeds.items() if k in wanted})))

    return run


Shapes = Dict[str, Tuple[List[int], Any]]  # value name -> (shape, dtype) seen in a sample run


def _recording(part: Any, seen: Shapes, first_only: bool = True) -> Any:
    """``part``, writing the shapes of its feeds and outputs into ``seen`` (the first call's, or the last's)."""

    def run(feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        out = part(feeds)
        for k, v in list(feeds.items()) + list(out.items()):
            if not first_only or k not in seen:
                seen[k] = (list(np.shape(v)), np.asarray(v).dtype)
        return out

    return run


def _declare(values: Any, seen: Shapes, open_dims: bool = False) -> None:
    """Declare on ``values`` (graph inputs or outputs) the shapes seen (``open_dims``: their rank only)."""
    for v in values:
        if v.name not in seen:
            continue
        v.type.tensor_type.ClearField("shape")
        shape = v.type.tensor_type.shape
        shape.SetInParent()  # a 0-d value: a shape with no dims, not an unknown rank
        for j, d in enumerate(seen[v.name][0]):
            dim = shape.dim.add()
            if open_dims:
                dim.dim_param = f"{v.name}_{j}"
            else:
                dim.dim_value = d


def sample_shapes(
    sg: SplitGraphs, whole: Any, feeds: Dict[str, np.ndarray], step_feeds: Optional[List[Dict[str, Any]]] = None
) -> Tuple[Shapes, Shapes]:
    """Every part's input and output shapes on ``feeds`` (the step's on its last call) and the first step call's;
    the split's outputs checked against the whole model's. ``step_feeds``: gets the inputs of every step call,
    the first included."""
    seen: Shapes = {}
    step = _ort(sg.step)
    if step_feeds is not None:
        plain = step

        def step(f: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
            step_feeds.append({k: np.array(v) for k, v in f.items()})
            return plain(f)

    # the step's outputs are its steady shapes (its 1st call's inputs may carry paddle2onnx's placeholders)
    steps: Shapes = {}
    firsts: Shapes = {}
    parts = (_recording(_ort(sg.encoder), seen), _recording(step, steps, False), _recording(_ort(sg.tail), seen))
    out = run_split(sg.spec, *parts, feeds, first=_recording(step, firsts))
    if not firsts:
        raise ConvertError(
            f"the sample input ran no step of the model's Loop {sg.spec.node}, so the step's shapes are unknown: "
            "convert cannot split this model"
        )
    want = dict(zip([o.name for o in whole.get_outputs()], whole.run(None, feeds)))
    for name, ref in want.items():
        got = out[name]
        if got.shape != ref.shape or not np.allclose(got, ref, rtol=1e-3, atol=1e-4):
            raise ConvertError(
                f"the model split around its Loop gives other outputs than the whole model on a sample input "
                f"({name}: {got.shape} vs {ref.shape}): it cannot be run as encoder, step and tail"
            )
    seen.update(steps)
    return seen, firsts


def _steady(sg: SplitGraphs, seen: Shapes) -> LoopSpec:
    """The spec with each carried input's and the condition's steady shape: what the step returns for it."""
    spec = sg.spec
    carried = []
    for c in spec.carried:
        source = c.output if c.output is not None else c.input
        carried.append(c.model_copy(update={"shape": seen[source][0]}))
    seen[spec.cond_input] = seen[spec.cond_output]
    for c in carried:
        seen[c.input] = (c.shape, seen[c.input][1])
    return spec.model_copy(update={"carried": carried, "cond_shape": seen[spec.cond_output][0]})


def _needs_first(spec: LoopSpec, seen: Shapes, firsts: Shapes) -> bool:
    """Whether a first value has another number of elements than the step's steady input (a reshape cannot do)."""
    names = [spec.cond_input] + [c.input for c in spec.carried]
    return any(int(np.prod(firsts[n][0])) != int(np.prod(seen[n][0])) for n in names)


def _manifest(
    model: Any, data_dependent: List[str], soc: str, precision: str, path: Path, steps: Dict[str, int]
) -> mf.OMManifest:
    """A part's manifest: static, or (the tail) dymshape with data-dependent outputs, where ``steps`` names the
    inputs stacked over the steps (a Loop's scan outputs: dim 0 from 1 to the trip count, -1 when unbounded)."""
    from onnx.helper import tensor_dtype_to_np_dtype

    specs = [
        mf.InputSpec(
            name=i.name,
            dtype=str(tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)),
            format="NCHW" if len(i.type.tensor_type.shape.dim) == 4 else "ND",
            shape=[d.dim_value or -1 for d in i.type.tensor_type.shape.dim],
        )
        for i in model.graph.input
    ]
    outputs = [o.name for o in model.graph.output]
    if data_dependent:
        man = mf.OMManifest(
            mode="dymshape",
            inputs=[
                s.model_copy(update={"range": [(1, steps[s.name]) if d < 0 else (d, d) for d in s.shape]})
                for s in specs
            ],
            data_dependent=data_dependent,
            outputs=outputs,
        )
    else:
        man = mf.OMManifest(mode="static", inputs=specs, outputs=outputs)
    return man.model_copy(update={"soc_version": soc, "precision": precision, "onnx_sha256": mf.sha256(path)})


def _rename_reads(graph: Any, old: str, new: str) -> None:
    """Every read of ``old`` in ``graph`` and its subgraphs (an ``If`` branch reads outer values by name)."""
    for node in graph.node:
        for j, name in enumerate(node.input):
            if name == old:
                node.input[j] = new
        for a in node.attribute:
            if a.HasField("g"):
                _rename_reads(a.g, old, new)


def pin_outputs(model: Any, seen: Shapes) -> None:
    """End each output of a static part in a ``Reshape`` to the shape the sample run gave it, so that GE, which
    infers every shape itself and ignores ONNX's annotations (correction 33: an ``If`` whose branches differ in
    rank merges to an unknown rank; ``ConstantOfShape`` of a computed shape is not known before it runs), types
    every output of the OM from a constant."""
    from onnx import helper, numpy_helper

    graph = model.graph
    producers = {o: node for node in graph.node for o in node.output}
    for out in graph.output:
        node = producers.get(out.name)
        if node is None or out.name not in seen:
            continue  # an input or a weight passed through: its shape is known
        inner, shape = out.name + "__unpinned", out.name + "__pinned_shape"
        node.output[list(node.output).index(out.name)] = inner
        _rename_reads(graph, out.name, inner)
        graph.initializer.append(numpy_helper.from_array(np.array(seen[out.name][0], np.int64), shape))
        graph.node.append(helper.make_node("Reshape", [inner, shape], [out.name], name=out.name + "__pin"))


def tail_bounds(proto: Any, tail: Any, seen: Shapes, scanned: Dict[str, int]) -> List[List[Optional[int]]]:
    """The tail's output dims at most: the whole model's declared dims where it has them, and an open dim ``j``
    bounded by dim ``j`` of the values the tail reads, the carried buffers it slices (SLANet's ``[1, 501, 50]``
    bounds ``[1, steps, 50]``) and the stacks over the steps (the trip count; None when unbounded: then
    ``data_dependent_max`` bounds it)."""
    reads = []
    for v in tail.graph.input:
        shape: List[Optional[int]] = list(seen.get(v.name, ([], None))[0])
        if v.name in scanned:
            shape[0] = scanned[v.name] if scanned[v.name] > 0 else None
        reads.append(shape)
    dims: List[List[Optional[int]]] = []
    for o in proto.graph.output:
        declared = [d.dim_value if d.dim_value > 0 else None for d in o.type.tensor_type.shape.dim]
        bound = [d if d is not None else _largest([r[j] for r in reads if len(r) > j]) for j, d in enumerate(declared)]
        sampled = seen.get(o.name, (bound, None))[0]
        if len(sampled) != len(bound) or any(b is not None and s > b for s, b in zip(sampled, bound)):
            raise ConvertError(
                f"the split model's output {o.name} has shape {sampled} on the sample input, beyond the bound "
                f"{bound} taken from the values its tail reads: convert cannot bound its device buffer"
            )
        dims.append(bound)
    return dims


def _largest(dims: List[Optional[int]]) -> Optional[int]:
    return None if not dims or any(d is None for d in dims) else max(dims)  # type: ignore[type-var]


def reserved_bytes(model: Any, dims: List[List[int]]) -> Dict[str, int]:
    """The device memory one call of a part allocates (ais_bench mallocs every input and every output buffer per
    call, correction 34): input bytes at the part's shapes, output bytes at ``dims`` (static or bounded)."""
    from onnx.helper import tensor_dtype_to_np_dtype

    def nbytes(values: Any, shapes: List[List[int]]) -> int:
        return sum(
            int(np.prod(s, dtype=np.int64)) * np.dtype(tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type)).itemsize
            for v, s in zip(values, shapes)
        )

    ins = [[d.dim_value or 1 for d in v.type.tensor_type.shape.dim] for v in model.graph.input]
    return {"inputs": nbytes(model.graph.input, ins), "outputs": nbytes(model.graph.output, dims)}


UNROLL = 16  # decoder steps per device call when the step can be made static-shaped (build/step_unroll.py)


def _unrolled(sg: SplitGraphs, spec: LoopSpec, seen: Shapes, step_feeds: List[Dict[str, Any]]) -> Tuple[Any, str]:
    """``sg.step`` replaced by :data:`UNROLL` static-shaped steps per call where :func:`.step_static.static_step`
    shows the static step exact on every sampled step (and no scan output needs a row per step); the spec and a
    note."""
    from ..om.loop_split import REMAINING, STEPS_RUN
    from .step_static import static_step
    from .step_unroll import unroll

    samples = [{k: v.reshape(seen[k][0]) if k in seen else v for k, v in f.items()} for f in step_feeds]
    if spec.scans or not samples:
        return spec, "the decoder step stays one device call per step (it stacks a value per step)"
    static, why = static_step(sg.step, samples)
    if static is None:
        return spec, f"the decoder step stays one device call per step: {why}"
    sg.step = unroll(static, spec, UNROLL)
    seen[REMAINING] = ([], np.dtype(np.int64))
    seen[STEPS_RUN] = ([1], np.dtype(np.int64))
    note = f"the decoder step {why}, {UNROLL} steps per device call with the stop condition in the graph"
    return spec.model_copy(update={"unroll": UNROLL}), note


def _static_first(first: Any, feeds: Dict[str, Any]) -> Tuple[Any, str]:
    """The first step made static-shaped as the steady step is: it always runs at iteration 0 on the first values'
    shapes, so its one sampled call shows every shape it will take; kept only if exact on it."""
    from .step_static import static_step

    static, why = static_step(first, [feeds])
    if static is None:
        return first, f"the first decoder step stays as the graph has it: {why}"
    return static, f"the first decoder step {why}"


def _write_part(
    proto: Any, folder: str, model: Any, out: Path, seen: Shapes, scanned: Dict[str, int], soc: str, precision: str
) -> Part:
    """One part written to ``out/inference.onnx`` with its manifest: a static part's outputs pinned to their
    sampled shapes, the tail's bounded by what it reads; the device memory a call allocates recorded."""
    import onnx

    from ..run.shape_solver import derive_file

    path = out / "inference.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    vector_scalars(model)
    dd = [o.name for o in model.graph.output] if folder == "tail" else []
    if not dd:
        pin_outputs(model, seen)
    onnx.save(model, str(path))
    man = _manifest(model, dd, soc, precision, path, scanned if folder == "tail" else {})
    dims = tail_bounds(proto, model, seen, scanned) if dd else derive_file(path, dd)
    shapes = [[d or 1 for d in ds] for ds in dims] if dd else [seen[o.name][0] for o in model.graph.output]
    return Part(folder, path, man.model_copy(update={"output_dims": dims, "reserved": reserved_bytes(model, shapes)}))


def split_parts(
    onnx_path: Path, work: Path, input_shapes: Dict[str, List[int]], soc: str, precision: str
) -> Tuple[List[Part], LoopSpec, List[str]]:
    """Write the encoder over ``work/inference.onnx`` and ``work/step``, ``work/tail``; their manifests (the
    encoder's without ``loop``), the loop spec and notes."""
    import onnx
    import onnxruntime as ort

    proto = onnx.load(str(onnx_path))
    sg = split_loop(proto)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    whole = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.random(input_shapes[i.name], dtype=np.float32) for i in whole.get_inputs()}
    step_feeds: List[Dict[str, Any]] = []
    seen, firsts = sample_shapes(sg, whole, feeds, step_feeds)
    spec = _steady(sg, seen)
    first = None
    if _needs_first(spec, seen, firsts):
        first = onnx.ModelProto()
        first.CopyFrom(sg.step)
        _declare(first.graph.input, firsts)
        _declare(first.graph.output, seen)
        spec = spec.model_copy(update={"first": "first"})
        first, first_note = _static_first(first, step_feeds[0])
    _declare(sg.encoder.graph.input, {k: (list(v.shape), v.dtype) for k, v in feeds.items()})
    _declare(sg.encoder.graph.output, seen)
    _declare(sg.step.graph.input, seen)
    _declare(sg.step.graph.output, seen)
    spec, unroll_note = _unrolled(sg, spec, seen, step_feeds[1:] if first is not None else step_feeds)
    _declare(sg.tail.graph.input, seen)
    _declare(sg.tail.graph.output, seen, open_dims=True)
    scanned = {result: spec.max_steps or -1 for _, result in spec.scans}
    for v in sg.tail.graph.input:  # a stack over the steps: as many rows as the decoder ran
        if v.name in scanned:
            v.type.tensor_type.shape.dim[0].dim_param = "steps"
    models = [("", sg.encoder), ("step", sg.step), ("tail", sg.tail)] + ([("first", first)] if first else [])
    parts = [
        _write_part(proto, folder, model, work / folder, seen, scanned, soc, precision) for folder, model in models
    ]
    notes = [
        f"the model's Loop {spec.node} (a data-dependent decoder, up to {spec.max_steps or 'unbounded'} steps) "
        "cannot be built by ATC (its ONNX parser reads no Loop body): split into encoder (this package), "
        f"{'first/, ' if first else ''}step/ and tail/ OM packages, the loop run on the host",
        unroll_note,
        *([first_note] if first is not None else []),
    ]
    return parts, spec, notes
