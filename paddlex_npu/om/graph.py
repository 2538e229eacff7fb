"""What an ONNX graph says about its OM's outputs (``onnx`` only, no runtime): which outputs have a shape that
depends on the input values, so that only a dymshape OM can return them (see :mod:`.manifest`)."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Set, Union

from ..deps import require

# ONNX operators whose output shape follows the input values, not only the input shapes.
DATA_DEPENDENT_OPS = frozenset({"NonMaxSuppression", "NonZero", "Unique", "Compress", "MultiClassNMS"})


def _fixed(value_info) -> bool:
    """Whether a graph output declares a shape with every dim a known number."""
    t = value_info.type.tensor_type
    return t.HasField("shape") and all(d.HasField("dim_value") and d.dim_value > 0 for d in t.shape.dim)


def data_dependent_outputs(onnx_path: Union[str, Path]) -> List[str]:
    """Outputs computed from a data-dependent-shape operator (NMS, NonZero, ...) whose declared shape is not
    fully fixed: ``boxes [M, 6]`` after NMS is one, ``box_num [1]`` is not."""
    onnx = require("onnx", "reading the model graph (convert, inspect, the reference runtime)")

    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    producers: Dict[str, object] = {out: node for node in graph.node for out in node.output}
    tainted: Set[str] = set()
    for node in graph.node:  # ONNX nodes are topologically sorted
        if node.op_type in DATA_DEPENDENT_OPS or any(i in tainted for i in node.input):
            tainted.update(node.output)
    return [o.name for o in graph.output if o.name in tainted and o.name in producers and not _fixed(o)]
