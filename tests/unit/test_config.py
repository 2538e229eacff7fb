def test_runtime_lists_come_from_the_one_table():
    """The config's type, the session's choices and selftest's subset are the table's rows: a runtime added to
    :data:`paddlex_npu.runtimes.RUNTIMES` is accepted everywhere at once."""
    from typing import get_args

    from paddlex_npu import runtimes
    from paddlex_npu.config import OMBackendConfig
    from paddlex_npu.om.package import ONNX_RUNTIMES
    from paddlex_npu.run.session import RUNTIMES

    field = OMBackendConfig.model_fields["runtime"].annotation
    literal = [a for a in get_args(field) if a is not type(None)][0]
    assert set(get_args(literal)) == set(runtimes.NAMES) == set(RUNTIMES)
    assert set(ONNX_RUNTIMES) == {"reference", "simulated"}
    assert runtimes.SELFTEST_NAMES == ("ais_bench", "reference")
