"""The dispatch point (qops/backends/dispatch.py): every implementation listed,
runnable by name where it takes the call, and switchable off and on."""

import numpy as np
import pytest

import qops
from qops import reference
from qops.backends import dispatch
from qops.ops import matmul as matmul_front

pytest.importorskip("qops.backends.native._lean")

u8, i8 = np.uint8, np.int8
MATMUL = "QUANTIZED_LINEAR_MATRIX_MULTIPLY"


def small_slots(rng, rows=3):
    return dict(a=rng.integers(0, 256, (rows, 4), dtype=u8), a_scale=np.float32(0.02),
                a_zero_point=u8(128), b=rng.integers(-128, 128, (4, 5), dtype=i8),
                b_scale=np.float32(0.01), b_zero_point=None, output_scale=np.float32(0.05),
                output_zero_point=u8(120))


def expected(slots):
    return reference.quantized_linear_matrix_multiply(**slots, output_dtype=np.dtype(u8))


def test_every_implementation_is_listed_best_first():
    names = dispatch.summary()
    assert names[MATMUL] == ["lean", "kernels", "reference"]
    assert names["QuantizeLinear"] == ["lean", "kernels", "reference"]
    assert names["QUANTIZED_LINEAR_CONVOLUTION"][-1] == "reference"
    shown = qops.config.config()["implementations"]
    assert shown == names


def test_each_implementation_runs_a_call_it_takes_by_name_and_equals_the_reference():
    rng = np.random.default_rng(0)
    slots = small_slots(rng)
    call = matmul_front.prepare(dict(slots), {"output_dtype": None})
    for entry in dispatch.implementations(MATMUL):
        assert entry.supports(call)
        got = dispatch.execute(call, 1, implementation=entry.name)
        assert np.array_equal(got, expected(slots)), entry.name


def test_an_implementation_named_for_a_call_it_does_not_take_is_a_lookup_error():
    rng = np.random.default_rng(1)
    large = dict(small_slots(rng), a=rng.integers(0, 256, (200, 300), dtype=u8),
                 b=rng.integers(-128, 128, (300, 5), dtype=i8))
    call = matmul_front.prepare(dict(large), {"output_dtype": None})
    with pytest.raises(LookupError, match="'lean' implementation does not take"):
        dispatch.execute(call, 1, implementation="lean")
    with pytest.raises(LookupError, match="no implementation 'nonesuch'"):
        dispatch.execute(call, 1, implementation="nonesuch")


def test_switching_the_lean_path_off_reaches_planned_calls_and_its_fast_path():
    rng = np.random.default_rng(2)
    slots = small_slots(rng)
    qops.quantized_linear_matrix_multiply(**slots)  # planned, and learnt by the fast path
    assert matmul_front.FAST.get() is not None
    ran = []
    kernels = next(e for e in dispatch.implementations(MATMUL) if e.name == "kernels")
    real_prepare = kernels.prepare

    def spy(call, *arguments):
        ran.append(call.operator.name)
        return real_prepare(call, *arguments)

    try:
        dispatch.set_enabled(MATMUL, "lean", False)
        assert "lean" not in dispatch.summary()[MATMUL]
        assert matmul_front.FAST.get() is None
        object.__setattr__(kernels, "prepare", spy)
        again = small_slots(rng)
        assert np.array_equal(qops.quantized_linear_matrix_multiply(**again), expected(again))
        assert ran == [MATMUL], "the signature was planned again, on the kernels"
    finally:
        object.__setattr__(kernels, "prepare", real_prepare)
        dispatch.set_enabled(MATMUL, "lean", True)
    assert matmul_front.FAST.get() is not None


def test_the_reference_cannot_be_switched_off_and_unknown_names_are_refused():
    with pytest.raises(ValueError, match="cannot be switched off"):
        dispatch.set_enabled(MATMUL, "reference", False)
    with pytest.raises(LookupError):
        dispatch.set_enabled(MATMUL, "nonesuch", False)


@pytest.mark.parametrize("shape, dtype", [((128, 768), np.uint8), ((3, 50, 70), np.int32),
                                          ((4096,), np.int8), ((7, 9), np.uint8),
                                          ((0, 5000), np.uint8)])
def test_outputs_start_on_a_cache_line(shape, dtype):
    """Outputs the operators allocate are C-contiguous arrays of the shape
    and type asked, starting on a 64-byte line from ALIGNED_OUTPUT_BYTES on
    (threads writing neighbouring blocks then share no line at a block's
    start), whatever np.empty would have given."""
    from qops.backends.contract import ALIGNED_OUTPUT_BYTES, empty_output

    for _ in range(8):  # np.empty alternates between aligned and not
        out = empty_output(shape, dtype)
        assert out.shape == shape and out.dtype == dtype and out.flags.c_contiguous
        assert out.flags.writeable
        if out.nbytes >= ALIGNED_OUTPUT_BYTES:
            assert out.ctypes.data % 64 == 0
    rng = np.random.default_rng(3)
    a = rng.integers(0, 256, (128, 768), dtype=np.uint8)
    b = rng.integers(-128, 128, (768, 64), dtype=np.int8)
    for _ in range(4):
        y = qops.quantized_linear_matrix_multiply(
            a=a, a_scale=np.float32(0.02), a_zero_point=np.uint8(128), b=b,
            b_scale=np.float32(0.01), output_scale=np.float32(0.5))
        assert y.ctypes.data % 64 == 0
