"""Options of the OM backend: ``hpi_config["backend_config"]`` or the ``om`` engine's ``engine_config``."""

from __future__ import annotations

from typing import Any, Dict, List, Literal, Mapping, Optional, Sequence, Union, get_args

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, StrictInt, ValidationError, field_validator

from .errors import ConfigError
from .runtimes import RuntimeName

MAX_CUSTOM_SIZE = 16 * 1024**3


class SimulationConfig(BaseModel):
    """Options of the simulated device (runtime ``simulated``); unset values take the defaults of
    :mod:`paddlex_npu.run.simulated` (cost model from the published 310P3 figures, by task)."""

    model_config = ConfigDict(extra="forbid")

    base_ms: Optional[float] = Field(None, ge=0, description="device time of every call, ms")
    ms_per_melem: Optional[float] = Field(None, ge=0, description="device time per million input elements, ms")
    pcie_gbps: Optional[float] = Field(
        None, ge=0, description="host<->device copy rate, GB/s each way (0: copies free; default 16)"
    )
    malloc_us: Optional[float] = Field(None, ge=0, description="per aclrtMalloc(Host) of a call's buffers, us")
    free_us: Optional[float] = Field(None, ge=0, description="per aclrtFree(Host) of a call's buffers, us")
    memcpy_us: Optional[float] = Field(None, ge=0, description="per synchronous copy or host sync, us, besides bytes")
    aicpu_us: Optional[float] = Field(None, ge=0, description="per node on the AI CPU per call, us")
    store: Optional[str] = Field(None, description="replay store folder (default $PADDLEX_NPU_SIM_STORE)")
    lock_dir: Optional[str] = Field(None, description="per-device lock files (default $PADDLEX_NPU_SIM_LOCKS)")


class OMBackendConfig(BaseModel):
    """Validated OM backend options. Unknown keys are rejected with the list of valid ones."""

    model_config = ConfigDict(extra="forbid")

    runtime: Optional[RuntimeName] = Field(
        None, description="session runtime; default: $PADDLEX_NPU_RUNTIME, else ais_bench"
    )
    simulation: Optional[SimulationConfig] = Field(None, description="the simulated device's cost model and files")
    custom_sizes: Optional[Union[StrictInt, List[StrictInt]]] = Field(
        None, description="bytes reserved per output, in (0, 16 GiB]; default: computed per call from the input shapes"
    )
    data_dependent_max: PositiveInt = Field(
        1000,
        description="upper bound of every output dim that the input values decide (e.g. boxes kept by NMS); "
        "output buffers are sized for it. Default 1000",
    )
    warmup_runs: int = Field(0, ge=0, description="inferences run at load time on zero inputs")
    warmup_gears: bool = Field(
        True, description="run every gear of a gear or static OM once at load, on zero inputs (each timed and logged)"
    )
    warmup_shapes: Optional[Dict[str, List[PositiveInt]]] = Field(
        None, description="input name -> shape used for warm-up (default: dynamic dims set to 1 / 64)"
    )
    manifest: Optional[Dict[str, Any]] = Field(
        None, description="OM manifest (schema: paddlex_npu.om.manifest) overriding or standing in for its JSON file"
    )
    memory_budget: Optional[PositiveInt] = Field(
        None,
        description="bytes of input + output buffers one gear may take; larger gears are refused at load "
        "(default: $PADDLEX_NPU_MEMORY_BUDGET, else 1 GiB)",
    )
    pad_value: float = Field(0.0, description="value that pads inputs up to a gear (after normalisation)")
    oversize: Literal["error", "fit"] = Field(
        "fit",
        description="an input larger than every gear: 'fit' resizes it down to the largest gear (text recognition: "
        "width squeezed; text detection: image scaled, DB map scaled back) with one warning per model; 'error' "
        "refuses it (InputShapeError)",
    )
    acl_json_path: Optional[str] = Field(None, description="acl.json for profiling or dump")
    debug: bool = Field(False, description="ais_bench debug logs")

    @field_validator("custom_sizes")
    @classmethod
    def _sizes_in_range(cls, value: Union[int, List[int], None]) -> Union[int, List[int], None]:
        sizes = [value] if isinstance(value, int) else value
        if sizes is not None and not sizes:
            raise ValueError("an empty list: give one size per output, or leave custom_sizes out")
        for size in sizes or []:
            if not 0 < size <= MAX_CUSTOM_SIZE:
                raise ValueError(f"{size} bytes is outside (0, {MAX_CUSTOM_SIZE}] (ais_bench's limit, 16 GiB)")
        return value


class OMEngineConfig(OMBackendConfig):
    """``engine_config`` of the ``om`` engine: the backend options plus the device."""

    device_type: Literal["npu"] = "npu"
    device_id: int = Field(0, ge=0, le=255)


def validate(model: type, raw: Mapping[str, Any], where: str) -> BaseModel:
    """Validate ``raw`` with ``model``; errors name the bad key, the value given, and what is allowed."""
    try:
        return model.model_validate(dict(raw))
    except ValidationError as exc:
        problems, valid = [], ""
        for e in exc.errors():
            loc = ".".join(str(p) for p in e["loc"]) or "<root>"
            if e["type"] == "extra_forbidden":
                inner = _model_at(model, e["loc"][:-1])
                valid = f". Valid keys{' of ' + loc.rsplit('.', 1)[0] if len(e['loc']) > 1 else ''}: "
                valid += ", ".join(sorted(inner.model_fields))
            problems.append(f"{loc}: {e['msg']} (got {e['input']!r})")
        raise ConfigError(f"invalid {where}: {'; '.join(problems)}{valid}") from None


def _model_at(model: type, path: Sequence[Any]) -> type:
    """The pydantic model of the nested field at ``path`` (``model`` itself for an empty path)."""
    for part in path:
        field = model.model_fields.get(str(part))
        annotation = field.annotation if field is not None else None
        options = get_args(annotation) or (annotation,)  # Optional[X] -> (X, None)
        nested = [a for a in options if isinstance(a, type) and issubclass(a, BaseModel)]
        if not nested:
            return model
        model = nested[0]
    return model
