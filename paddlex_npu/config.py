"""Options of the OM backend: ``hpi_config["backend_config"]`` or the ``om`` engine's ``engine_config``."""

from __future__ import annotations

from typing import Any, Dict, List, Literal, Mapping, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import ConfigError


class OMBackendConfig(BaseModel):
    """Validated OM backend options. Unknown keys are rejected with the list of valid ones."""

    model_config = ConfigDict(extra="forbid")

    runtime: Optional[Literal["ais_bench", "reference"]] = Field(
        None, description="session runtime; default: $PADDLEX_NPU_RUNTIME, else ais_bench"
    )
    custom_sizes: Optional[Union[int, List[int]]] = Field(
        None, description="bytes reserved per output; default: computed per call from the input shapes"
    )
    warmup_runs: int = Field(0, ge=0, description="inferences run at load time on zero inputs")
    warmup_shapes: Optional[Dict[str, List[int]]] = Field(
        None, description="input name -> shape used for warm-up (default: dynamic dims set to 1 / 64)"
    )
    manifest: Optional[Dict[str, Any]] = Field(
        None, description="OM manifest (schema in paddlex_npu.manifest) overriding or standing in for inference.om.json"
    )
    pad_value: float = Field(0.0, description="value that pads inputs up to a gear (after normalisation)")
    acl_json_path: Optional[str] = Field(None, description="acl.json for profiling or dump")
    debug: bool = Field(False, description="ais_bench debug logs")


class OMEngineConfig(OMBackendConfig):
    """``engine_config`` of the ``om`` engine: the backend options plus the device."""

    device_type: Literal["npu"] = "npu"
    device_id: int = Field(0, ge=0, le=255)


def validate(model: type, raw: Mapping[str, Any], where: str) -> BaseModel:
    """Validate ``raw`` with ``model``; errors name the bad key and the valid ones."""
    try:
        return model.model_validate(dict(raw))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"invalid {where}: {problems}. Valid keys: {', '.join(sorted(model.model_fields))}") from None
