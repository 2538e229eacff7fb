"""Output buffer sizes and the memory budget (run/buffers.py): the bytes reserved, not only that no error is raised."""

from __future__ import annotations

import numpy as np
import pytest

from paddlex_npu.errors import ConfigError
from paddlex_npu.om.output_shapes import OutputShapes
from paddlex_npu.run import buffers
from paddlex_npu.run.buffers import MAX_BYTES, MIN_BYTES, OutputSizer, check_gear_budget

X = np.zeros((2, 3, 32, 40), np.float32)


def test_a_static_output_reserves_its_own_bytes_above_the_floor():
    # 1 x 100 x 200 float32 = 80,000 bytes -> 81,920 (20 pages of 4 KiB); 10 float16 -> the 64 KiB floor
    sizer = OutputSizer([[1, 100, 200], [10]], [4, 2])
    assert sizer.sizes([X]) == [81920, MIN_BYTES]
    assert sizer.shapes_for([[2, 3, 32, 40]]) == [None, None]
    assert sizer.unsized() == []


def test_inferred_shapes_give_their_bytes_rounded_up_to_4_kib_and_capped():
    calls = []

    def infer(shapes):
        calls.append(shapes)
        n, _, h, w = shapes[0]
        return [[n, 1, h * 10, w * 10 + 1], [1 << 31, 4]]

    sizer = OutputSizer([[-1, 1, -1, -1], [-1, 4]], [4, 4], infer=infer)
    # 2 x 320 x 401 x 4 = 1,026,560 bytes, rounded up to 4 KiB: 251 x 4,096; 2**31 x 4 x 4 bytes: capped at 16 GiB
    assert sizer.sizes([X]) == [251 * 4096, MAX_BYTES]
    assert sizer.sizes([X]) == [251 * 4096, MAX_BYTES]
    assert calls == [[[2, 3, 32, 40]]]  # one inference per input shapes: the second call is cached
    assert sizer.shapes_for([[2, 3, 32, 40]]) == [[2, 1, 320, 401], [1 << 31, 4]]


@pytest.mark.parametrize("dims", [[[2, 0, 7]], [[2, -1, 7]], [None], []])
def test_an_output_shape_inference_cannot_tell_asks_for_custom_sizes(dims):
    """A 0 dim from ONNX shape inference means unknown: reserving the 64 KiB floor for it would be the too-small
    buffer a device call fails on; the runner refuses and names ``custom_sizes`` and ``convert``."""
    sizer = OutputSizer([[-1, -1, 7]], [4], infer=lambda shapes: dims, output_names=["maps"])
    with pytest.raises(ConfigError, match=r"maps: its size for inputs \[\[2, 3, 32, 40\]\] cannot be derived") as e:
        sizer.sizes([X])
    assert "backend_config['custom_sizes']" in str(e.value) and "paddlex-npu convert" in str(e.value)


def test_without_inference_an_unknown_output_is_unsized_and_custom_sizes_override_everything():
    sizer = OutputSizer([[-1, 6], [4]], [4, 4], output_names=["boxes", "n"])
    assert sizer.unsized() == ["boxes"]
    with pytest.raises(ConfigError, match="boxes: its size"):
        sizer.sizes([X])
    fixed = OutputSizer([[-1, 6], [4]], [4, 4], fixed=[123, 456])
    assert fixed.unsized() == [] and fixed.sizes([X]) == [123, 456]
    solved = OutputSizer([[-1, 6], [-1]], [4, 4], shapes=OutputShapes([None, ["d0_0"]], 10))
    assert solved.unsized() == ["output 0"]


def test_the_cache_is_cleared_when_full(monkeypatch):
    monkeypatch.setattr(buffers, "CACHE_SHAPES", 2)
    sizer = OutputSizer([[-1]], [4], infer=lambda shapes: [[shapes[0][0]]])
    for n in (1, 2, 3):
        sizer.sizes([np.zeros((n,), np.float32)])
    assert len(sizer._cache) == 1  # two kept, the third cleared them


LIMIT = (1_000_000, "a test budget")
GIB = 1024**3


def test_the_output_buffers_count_with_the_largest_gear_wherever_it_is_listed():
    """The OM's output sizes describe its largest gear: they count there, even when that gear is not last."""
    big, small = [[1, 3, 200, 200]], [[1, 3, 100, 100]]  # 480,000 and 120,000 bytes of float32 input
    check_gear_budget("m", [big, small], ["x"], [4], 400_000, LIMIT)  # 880,000: fits
    with pytest.raises(ConfigError, match=r"the gear x:1,3,200,200 needs 468.8 KiB of input buffers \+ 537.1 KiB"):
        check_gear_budget("m", [big, small], ["x"], [4], 550_000, LIMIT)
    with pytest.raises(ConfigError, match=r"x:1,3,200,200 needs .* \+ 537.1 KiB of output buffers, above the memory"):
        check_gear_budget("m", [small, big], ["x"], [4], 550_000, LIMIT)
    # the outputs do not count with a smaller gear: 120,000 + 550,000 would fit, 480,000 + 550,000 not
    check_gear_budget("m", [small], ["x"], [4], 550_000, LIMIT)
    with pytest.raises(ConfigError, match=r"x:1,3,200,200 needs 468.8 KiB of input buffers, above .* \(a test budget"):
        check_gear_budget("m", [small, big], ["x"], [4], 0, (400_000, "a test budget"))
    check_gear_budget("m", [], ["x"], [4], 0, LIMIT)  # no gears (dymshape): nothing to check


def test_two_inputs_are_summed_with_their_own_itemsizes():
    gear = [[1, 100], [1, 100]]
    check_gear_budget("m", [gear], ["a", "b"], [4, 2], 0, (600, "b"))  # 400 + 200 bytes
    with pytest.raises(ConfigError, match=r"the gear a:1,100;b:1,100 needs 600 bytes of input buffers"):
        check_gear_budget("m", [gear], ["a", "b"], [4, 2], 0, (599, "b"))
    with pytest.raises(ConfigError, match=r"needs 4577.6 MiB"):
        check_gear_budget("m", [[[1200, 1000, 1000]]], ["a"], [4], 0, (GIB, "b"))


def test_the_memory_budget_comes_from_the_config_then_the_environment_then_the_default(monkeypatch):
    monkeypatch.delenv("PADDLEX_NPU_MEMORY_BUDGET", raising=False)
    assert buffers.memory_budget(5) == (5, "backend_config['memory_budget']")
    limit, where = buffers.memory_budget(None)
    assert limit == GIB and "the default" in where
    monkeypatch.setenv("PADDLEX_NPU_MEMORY_BUDGET", "2048")
    assert buffers.memory_budget(None) == (2048, "$PADDLEX_NPU_MEMORY_BUDGET")
    assert buffers.memory_budget(7) == (7, "backend_config['memory_budget']")
    for bad in ("0", "-5", "1e9", "lots"):
        monkeypatch.setenv("PADDLEX_NPU_MEMORY_BUDGET", bad)
        with pytest.raises(ConfigError, match="is not a positive number of bytes"):
            buffers.memory_budget(None)


def test_a_descriptor_dim_of_0_is_not_static_the_call_decides():
    sizer = OutputSizer([[0, 6]], [4], infer=lambda shapes: [[5000, 6]])
    assert sizer.sizes([X]) == [30 * 4096]  # 120,000 bytes, not the floor a 0-byte static output would get


def test_a_gear_exactly_at_the_budget_fits_and_only_the_largest_carries_the_outputs():
    small, big = [[1, 250]], [[1, 500]]  # 1,000 and 2,000 bytes
    check_gear_budget("m", [small, big], ["x"], [4], 1000, (3000, "b"))  # 1,000 | 2,000 + 1,000: both at most
    check_gear_budget("m", [small, big], ["x"], [4], 0, (2000, "b"))
    with pytest.raises(ConfigError, match=r"x:1,500 needs 2.0 KiB of input buffers \+ 1 bytes of output"):
        check_gear_budget("m", [small, big], ["x"], [4], 1, (2000, "b"))


@pytest.mark.parametrize(
    "n, text",
    [
        (1023, "1023 bytes"),
        (1024, "1.0 KiB"),
        (1024**2 - 52, "1023.9 KiB"),
        (1024**2, "1.0 MiB"),
        (3 * 1024**3, "3072.0 MiB"),
    ],
)
def test_byte_counts_in_messages(n, text):
    assert buffers._mib(n) == text


def test_a_budget_of_one_byte_is_a_budget(monkeypatch):
    monkeypatch.setenv("PADDLEX_NPU_MEMORY_BUDGET", "1")
    assert buffers.memory_budget(None) == (1, "$PADDLEX_NPU_MEMORY_BUDGET")


def test_gears_of_equal_size_carry_the_outputs_once():
    check_gear_budget("m", [[[1, 250]], [[250, 1]]], ["x"], [4], 0, (1000, "b"))  # 1,000 bytes each, at the limit
