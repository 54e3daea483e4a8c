"""The compiled matrix-multiply kernels against the NumPy reference, for every
SIMD variant and thread count."""

import glob
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_cases import TYPES, VARIANTS, _native, random_values, reference, run_variant

from qops.backends.native import variants as _simd
from qops.backends.native.kernels import _peak_probes
from qops.backends.native.variants import VARIANTS as ALL_VARIANTS
import qops
from qops.ops import matmul


@st.composite
def matmul_calls(draw):
    rank = draw(st.integers(2, 4))
    rows, depth, columns = (draw(st.integers(1, 40)) for _ in range(3))
    batch = [draw(st.integers(1, 3)) for _ in range(rank - 2)]
    a_batch = [b if draw(st.booleans()) else 1 for b in batch]
    b_batch = [b if draw(st.booleans()) else 1 for b in batch]
    a_type, b_type, out_type = (draw(st.sampled_from(TYPES)) for _ in range(3))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    per_row = draw(st.booleans())
    per_column = draw(st.booleans())
    scale_shape_a = (1,) * (rank - 2) + ((rows, 1) if per_row else (1, 1))
    scale_shape_b = (1,) * (rank - 2) + ((1, columns) if per_column else (1, 1))
    slots = dict(
        a=random_values(rng, tuple(a_batch) + (rows, depth), a_type),
        a_scale=rng.uniform(0.01, 0.1, scale_shape_a).astype(np.float32),
        a_zero_point=random_values(rng, scale_shape_a, a_type),
        b=random_values(rng, tuple(b_batch) + (depth, columns), b_type),
        b_scale=rng.uniform(0.01, 0.1, scale_shape_b).astype(np.float32),
        b_zero_point=random_values(rng, scale_shape_b, b_type),
        output_scale=rng.uniform(0.5, 4.0, scale_shape_a).astype(np.float32),
        output_zero_point=random_values(rng, scale_shape_a, out_type),
    )
    if draw(st.booleans()):
        slots["a_zero_point"] = None
    if draw(st.booleans()):
        slots["b_zero_point"] = None
    return matmul.prepare(slots, {}, "4_0")


@pytest.mark.parametrize("n_threads", [1, 2])
@settings(max_examples=60, deadline=None)
@given(call=matmul_calls())
def test_every_variant_matches_the_reference(call, n_threads):
    expected = reference(call)
    for variant in VARIANTS:
        got = run_variant(_native.run_matmul, call, variant, n_threads)
        assert np.array_equal(got, expected), variant


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("a_type", TYPES)
@pytest.mark.parametrize("b_type", TYPES)
def test_k_beyond_the_int32_chunk_is_exact(variant, a_type, b_type):
    """K = 70000 exceeds the 65536-term int32 chunk: the sum must still be exact.

    Every product is the extreme one, so the true sum is K * (a - a_zp) * (b - b_zp),
    far beyond int32; the output scale brings it back into range.
    """
    depth = 70000
    a_value, b_value = np.iinfo(a_type).max, np.iinfo(b_type).min
    a = np.full((1, depth), a_value, a_type)
    b = np.full((depth, 2), b_value, b_type)
    true_sum = depth * int(a_value) * int(b_value)
    scale = np.float32(2.0 ** -24)
    call = matmul.prepare(dict(a=a, a_scale=1.0, b=b, b_scale=1.0, output_scale=1 / scale,
                               output_zero_point=np.int8(0)), {}, "4_0")
    got = run_variant(_native.run_matmul, call, variant, 2)
    expected_value = np.clip(np.rint(np.float32(true_sum) * scale), -128, 127)
    assert got.tolist() == [[int(expected_value)] * 2]
    assert np.array_equal(got, reference(call))


def _cpu_flags():
    """The instruction-set flags Linux reports for this CPU (None elsewhere)."""
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


def test_the_variants_that_run_are_the_ones_this_cpu_has_and_the_build_made():
    """Told from the operating system's CPU flags and the extension files on
    disk, not from the detection the selection itself uses."""
    flags = _cpu_flags()
    if flags is None:
        pytest.skip("no /proc/cpuinfo: the CPU's flags are not known independently here")
    has = {"portable": True, "avx2": {"avx2", "fma"} <= flags,
           "avxvnni": {"avx2", "fma", "avx_vnni"} <= flags,
           "avx512vnni": {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni"} <= flags,
           "amx": {"amx_tile", "amx_int8"} <= flags and "avx512_vnni" in flags}
    folder = os.path.join(os.path.dirname(_simd.__file__), "kernels")
    built = {name for name in ALL_VARIANTS
             if glob.glob(os.path.join(folder, f"_qgemm_{name}.*.so"))
             or glob.glob(os.path.join(folder, f"_qgemm_{name}.*.pyd"))}
    # A process shown a lesser CPU (benchmarks/avx2_cpu.py, preloaded) runs
    # fewer variants than the flags list, and never more.
    shown_less = "avx2_cpu" in os.environ.get("LD_PRELOAD", "")
    for name in ALL_VARIANTS:
        if name == "amx" or shown_less:  # the system may still refuse AMX's tile state
            assert name not in VARIANTS or (has[name] and name in built)
        else:
            assert (name in VARIANTS) == (has[name] and name in built), name
    assert VARIANTS == tuple(n for n in ALL_VARIANTS if n in VARIANTS), "best first"


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_probes_the_peak_of_its_own_instructions(variant):
    _simd.module(variant)  # the variant loads (AMX: the process holds the tile state)
    probe = _peak_probes.probe(variant)
    instruction = {"amx": "tdpbusd", "avx512vnni": "vpdpbusd", "avxvnni": "vpdpbusd on ymm",
                   "avx2": "vpmaddwd",
                   "portable": "multiply-add" if "plain C" in probe.mix else "pmaddwd"}
    assert instruction[variant] in probe.mix
    gops = probe.peak_gops(1, 0.03)
    assert 0 < gops < float("inf")
    # Every chain of every round ran, at every placement of the loop that
    # peak_gops times: the loop's own sum counts them.
    for placement in range(4):
        for rounds in (1, 7, 1000):
            expected = (rounds * probe.result_per_round + 2**31) % 2**32 - 2**31
            assert probe.result(rounds, placement) == expected, (rounds, placement)
    with pytest.raises(ValueError, match="at least 1"):
        probe.peak_gops(0)
    for placement in (-1, 4):
        with pytest.raises(ValueError, match="placement must be 0 to 3"):
            probe.result(1, placement)


@pytest.mark.skipif("avx2" not in VARIANTS, reason="this CPU runs no AVX2")
def test_the_avx2_variant_probes_onnxruntimes_saturating_step_too():
    peer = _peak_probes.peer_probe("avx2")
    assert "vpmaddubsw" in peer.mix and "saturating" in peer.mix
    assert 0 < peer.peak_gops(1, 0.03) < float("inf")
    # Every chain of every round ran: per round, six chains each add in a
    # lane two words of two (unsigned 255) x (signed -1) byte products.
    for placement in range(4):
        for rounds in (1, 7, 1000):
            expected = (rounds * 6 * 2 * 2 * (255 * -1) + 2**31) % 2**32 - 2**31
            assert peer.result(rounds, placement) == expected, (rounds, placement)
    with pytest.raises(ValueError, match="at least 1"):
        peer.peak_gops(0)


_ON_AN_AVX2_CPU = """
import json, sys
import numpy as np
import qops
from qops.backends.native import variants
from qops.backends.native.kernels import _platform
from qops.cli import bench
rng = np.random.default_rng(5)
a = rng.integers(0, 256, (3, 70, 300), dtype=np.uint8)
b = rng.integers(-128, 128, (1, 300, 50), dtype=np.int8)
out = qops.quantized_linear_matrix_multiply(
    a, np.float32(0.02), np.uint8(131), b, np.float32(0.01), np.int8(-3),
    np.float32(0.5), np.uint8(120))
np.save(sys.argv[1], out)
info = bench.machine(1, 0.03)
print(json.dumps({"features": _platform.cpu_features(), "selected": variants.selected(),
                  "dot_product": bench.has_dot_product(), "line": bench.machine_line(info)}))
"""


def _shown_a_lesser_cpu(tmp_path, *options):
    """What _ON_AN_AVX2_CPU saw under benchmarks/avx2_cpu.py ``options``, and
    the product it saved."""
    import json
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__))))))
    tool = os.path.join(root, "benchmarks", "avx2_cpu.py")
    env = {key: value for key, value in os.environ.items() if key != "QOPS_SIMD"}
    saved = tmp_path / "out.npy"
    done = subprocess.run([sys.executable, tool, *options, sys.executable, "-c",
                           _ON_AN_AVX2_CPU, str(saved)],
                          capture_output=True, text=True, env=env, timeout=300)
    if done.returncode == 77:
        pytest.skip("neither CPUID faulting nor objdump here, or no C compiler: "
                    + done.stderr.strip())
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), np.load(saved)


def _expected_on_a_lesser_cpu():
    """_ON_AN_AVX2_CPU's product by the exact oracle."""
    from oracles import qlinear_matmul

    rng = np.random.default_rng(5)
    a = rng.integers(0, 256, (3, 70, 300), dtype=np.uint8)
    b = rng.integers(-128, 128, (1, 300, 50), dtype=np.int8)
    return qlinear_matmul(a, np.float32(0.02), np.uint8(131), b, np.float32(0.01),
                          np.int8(-3), np.float32(0.5), np.uint8(120))


def test_a_cpu_with_sse4_and_no_avx_runs_the_portable_variant_by_itself(tmp_path):
    """benchmarks/avx2_cpu.py --sse4 hides AVX of every width as well: qops
    then runs its portable kernels by itself, exactly."""
    seen, got = _shown_a_lesser_cpu(tmp_path, "--sse4")
    assert seen["features"]["portable"] and not seen["features"]["avx2"]
    assert not seen["features"]["avx512vnni"] and not seen["features"]["amx"]
    assert seen["selected"] == "portable" and seen["dot_product"] is False
    assert "pmaddwd" in seen["line"]
    assert np.array_equal(got, _expected_on_a_lesser_cpu())


def test_a_cpu_with_avx_vnni_and_no_avx512_runs_the_avxvnni_variant_by_itself(tmp_path):
    """benchmarks/avx2_cpu.py --avxvnni keeps AVX-VNNI and hides AVX-512: qops
    then chooses its AVX-VNNI kernels by itself, exactly, and the bench
    reports the dot product (onnxruntime's kernels are exact there)."""
    if "avxvnni" not in VARIANTS:
        pytest.skip("this CPU runs no AVX-VNNI")
    seen, got = _shown_a_lesser_cpu(tmp_path, "--avxvnni")
    assert seen["features"]["avxvnni"] and not seen["features"]["avx512vnni"]
    assert not seen["features"]["amx"]
    assert seen["selected"] == "avxvnni" and seen["dot_product"] is True
    assert "vpdpbusd on ymm" in seen["line"] and "vpmaddubsw" not in seen["line"]
    assert np.array_equal(got, _expected_on_a_lesser_cpu())


@pytest.mark.parametrize("way", [(), ("--audit",)], ids=["faulting or audit", "audit"])
def test_a_cpu_with_avx2_and_no_more_runs_the_avx2_variant_by_itself(tmp_path, way):
    """benchmarks/avx2_cpu.py hides AVX-512 and VNNI from CPUID (by CPUID
    faulting where the machine offers it, and by cpuid_audit.c's traps with
    --audit or where it does not): qops then chooses the AVX2 kernels by
    itself (no QOPS_SIMD), its product is exact, and the bench reports no
    dot product and onnxruntime's own AVX2 ceiling."""
    if "avx2" not in VARIANTS:
        pytest.skip("this CPU runs no AVX2")
    seen, got = _shown_a_lesser_cpu(tmp_path, *way)
    assert seen["features"]["avx2"] and not seen["features"]["avx512vnni"]
    assert not seen["features"]["amx"] and not seen["features"]["avxvnni"]
    assert seen["selected"] == "avx2" and seen["dot_product"] is False
    assert "vpmaddubsw" in seen["line"] and "x the exact peak" in seen["line"]
    assert np.array_equal(got, _expected_on_a_lesser_cpu())


_ONNXRUNTIMES_STEP = """
import numpy as np
import onnxruntime
from onnx import TensorProto, helper
from numpy._core._multiarray_umath import __cpu_features__
shape = [8, 64]
graph = helper.make_graph(
    [helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "step",
    [helper.make_tensor_value_info("a", TensorProto.UINT8, shape),
     helper.make_tensor_value_info("b", TensorProto.INT8, shape[::-1])],
    [helper.make_tensor_value_info("y", TensorProto.INT32, [8, 8])])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
model.ir_version = 8
session = onnxruntime.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
a = np.full(shape, 255, np.uint8)
b = np.full(shape[::-1], -128, np.int8)
print(int(session.run(None, {"a": a, "b": b})[0][0, 0]), bool(__cpu_features__["AVX512F"]))
"""


@pytest.mark.parametrize("way", [(), ("--audit",)], ids=["faulting or audit", "audit"])
def test_onnxruntime_and_numpy_run_their_avx2_code_under_the_tool(way):
    """Under benchmarks/avx2_cpu.py the peers choose their AVX2 code too: on a
    CPU with an 8-bit dot product, onnxruntime's u8 x s8 product of 255 and
    -128 over a depth of 64 is exact outside the tool and saturates each
    pair's 16-bit sum (-32768 for 2 x 255 x -128) under it, and NumPy sees
    no AVX-512."""
    import subprocess
    import sys

    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    flags = _cpu_flags()
    if flags is None or not {"avx512_vnni", "avx_vnni"} & flags or "avx512f" not in flags:
        pytest.skip("onnxruntime is exact here only with AVX-512 and a dot product")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__))))))
    tool = os.path.join(root, "benchmarks", "avx2_cpu.py")
    outside = subprocess.run([sys.executable, "-c", _ONNXRUNTIMES_STEP],
                             capture_output=True, text=True, timeout=300)
    assert outside.returncode == 0, outside.stderr
    assert outside.stdout.split() == [str(255 * -128 * 64), "True"]
    inside = subprocess.run([sys.executable, tool, *way, sys.executable, "-c", _ONNXRUNTIMES_STEP],
                            capture_output=True, text=True, timeout=300)
    if inside.returncode == 77:
        pytest.skip("neither CPUID faulting nor objdump here, or no C compiler: "
                    + inside.stderr.strip())
    assert inside.returncode == 0, inside.stderr
    assert inside.stdout.split() == [str(-32768 * 32), "False"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_entry_points_refuse_arguments_that_do_not_cover_the_output(variant):
    """The kernels trust the glue for every element access; their entry points
    check once that vectors, indices and buffers cover the output (no out-of-bounds)."""
    from qops.backends.native import variants as _simd
    kernels = _simd.module(variant)
    a = np.ones((1, 9, 5), np.uint8)
    packed_b, colsum = kernels.pack_b_batches(np.ones((1, 5, 7), np.uint8), False, 1)
    index = np.zeros(1, np.int64)
    good = dict(row_zero=np.zeros(9, np.int32), col_zero=np.zeros(7, np.int32),
                multiplier=np.ones((1, 7), np.float32), out_zero=np.zeros((1, 7), np.int32))
    out = np.empty((1, 9, 7), np.uint8)

    def call(arguments, a_index=index, b_index=index, target=out):
        kernels.matmul(a, False, a_index, packed_b, colsum, b_index, 7, *arguments.values(),
                       target, 0, 255, 1)

    call(good)
    assert (out == 5).all()
    for name, short in (("row_zero", np.zeros(8, np.int32)), ("col_zero", np.zeros(6, np.int32)),
                        ("multiplier", np.ones((9, 6), np.float32)),
                        ("out_zero", np.zeros((3, 7), np.int32))):
        with pytest.raises(ValueError, match="do not cover"):
            call(dict(good, **{name: short}))
    with pytest.raises(ValueError, match="do not cover"):
        call(good, target=np.empty((1, 9, 6), np.uint8))
    with pytest.raises(ValueError, match="out of range"):
        call(good, b_index=np.ones(1, np.int64))
    with pytest.raises(ValueError, match="not K x N"):
        kernels.matmul(a, False, index, None, None, index, 7, *good.values(), out, 0, 255, 1,
                       b_source=np.ones((1, 6, 7), np.uint8))


def exact_on_one_and_two_threads(slots, variant, label=None):
    """The matrix multiply of these slots on the variant, with 1 and 2
    threads, equals the reference."""
    call = matmul.prepare(slots, {}, "4_0")
    expected = reference(call)
    for n_threads in (1, 2):
        got = run_variant(_native.run_matmul, call, variant, n_threads)
        assert np.array_equal(got, expected), (label, n_threads)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("a_type", TYPES)
@pytest.mark.parametrize("b_type", TYPES)
def test_b_wider_than_a_packing_task(variant, a_type, b_type):
    """N = 300 spans three column tiles of 128 (each packed as one task) and
    ends in a partial panel; K = 9 ends in a partial group of 4."""
    rng = np.random.default_rng(300)
    slots = dict(a=random_values(rng, (2, 11, 9), a_type), a_scale=0.03,
                 a_zero_point=random_values(rng, (), a_type),
                 b=random_values(rng, (2, 9, 300), b_type), b_scale=0.02,
                 b_zero_point=random_values(rng, (), b_type), output_scale=0.7,
                 output_zero_point=random_values(rng, (), a_type))
    exact_on_one_and_two_threads(slots, variant)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("b_type", TYPES)
def test_b_packed_a_chunk_of_rows_at_a_time(variant, b_type):
    """The packer takes a chunk of rows of B (64 / NR groups of four: 4, 16
    or 32 rows) into every panel of a task before the next chunk, and a
    partial panel through copies of up to 32 rows: K = 1 and 3 (no whole
    group), 16, 17, 32, 33 and 67 (whole chunks, then a partial group), 100;
    N = 16, 17 and 130 (whole panels, or a partial last one).  The column
    sums are those of B' = B - 128 (uint8) or B (int8), zero past N; the
    products are exact."""
    kernels = _simd.module(variant)
    rng = np.random.default_rng(67)
    for depth in (1, 3, 16, 17, 32, 33, 67, 100):
        for columns in (16, 17, 130):
            b = random_values(rng, (depth, columns), b_type)
            _, colsum = kernels.pack_b_batches(b.view(np.uint8)[None], b_type == np.uint8, 1)
            shifted = b.astype(np.int64) - (128 if b_type == np.uint8 else 0)
            assert np.array_equal(colsum[0, :columns], shifted.sum(0)), (depth, columns)
            assert not colsum[0, columns:].any()
            slots = dict(a=random_values(rng, (7, depth), np.uint8), a_scale=0.03,
                         a_zero_point=random_values(rng, (), np.uint8), b=b, b_scale=0.02,
                         b_zero_point=random_values(rng, (), b_type), output_scale=0.5,
                         output_zero_point=random_values(rng, (), np.uint8))
            exact_on_one_and_two_threads(slots, variant, (depth, columns))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("a_type", TYPES)
@pytest.mark.parametrize("depth", [64, 66, "two blocks"])
@pytest.mark.parametrize("per_row", [False, True])
def test_short_last_blocks_of_rows(variant, a_type, depth, per_row, monkeypatch):
    """M that ends in a short block of micro-tile rows: inside a unit (5, 13,
    47, 104), alone after whole units (49, 50, 53, 97: the unit above takes it),
    or none (54); A read where it lies (uint8, K a multiple of 4 in one
    block) or packed (int8, K = 66, K in two blocks or more: 1100, or the
    variant's block and 76 where that is more); per-tensor or per-row
    requantization; N = 200 spans two units of columns."""
    monkeypatch.setattr(_native, "WORK_PER_THREAD", 1)
    if depth == "two blocks":
        depth = max(1100, _simd.module(variant).K_BLOCK + 76)
    rng = np.random.default_rng(depth)
    for rows in (5, 13, 47, 49, 50, 53, 54, 97, 104):
        scale_shape = (rows, 1) if per_row else ()
        slots = dict(a=random_values(rng, (rows, depth), a_type), a_scale=0.03,
                     a_zero_point=random_values(rng, (), a_type),
                     b=random_values(rng, (depth, 200), np.int8),
                     b_scale=rng.uniform(0.01, 0.03, (1, 200)).astype(np.float32),
                     b_zero_point=random_values(rng, (1, 200), np.int8),
                     output_scale=rng.uniform(20, 40, scale_shape).astype(np.float32),
                     output_zero_point=random_values(rng, scale_shape, np.uint8))
        exact_on_one_and_two_threads(slots, variant, rows)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("rows", [1, 2, 7, 8, 50])
def test_one_or_two_rows_at_every_count_of_groups(variant, rows, monkeypatch):
    """A pass of one or two rows (M = 1 or 2, or a tail under a whole
    micro-tile) that deals its groups to several sets of accumulators:
    counts of groups of every remainder by three and by two, one block of K
    and three or more (2100, or two of the variant's blocks and 52 k where
    that is more), A read where it lies (uint8, K a multiple of 4) and
    packed (int8)."""
    monkeypatch.setattr(_native, "WORK_PER_THREAD", 1)
    rng = np.random.default_rng(rows)
    three_blocks = max(2100, 2 * _simd.module(variant).K_BLOCK + 52)
    for depth in (1, 4, 8, 12, 16, 20, 24, 62, 64, 68, 72, three_blocks):
        for a_type in TYPES:
            slots = dict(a=random_values(rng, (rows, depth), a_type), a_scale=0.03,
                         a_zero_point=random_values(rng, (), a_type),
                         b=random_values(rng, (depth, 70), np.int8), b_scale=0.02,
                         b_zero_point=random_values(rng, (), np.int8),
                         output_scale=np.float32(rng.uniform(0.05, 0.2) * depth ** 0.5),
                         output_zero_point=random_values(rng, (), np.uint8))
            exact_on_one_and_two_threads(slots, variant, (rows, depth))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("rows", [1, 2, 3])
def test_short_blocks_read_the_narrowed_panels(variant, rows):
    """With b_narrow, a block of one or two rows reads the panels narrowed to
    bytes and nothing else of B' (given the narrowed panels of another B,
    its products are that B's), and a longer block never reads them; the
    variants whose panels are bytes already have no narrowed copy."""
    kernels = _simd.module(variant)
    rng = np.random.default_rng(rows)
    depth, columns = 300, 37
    a = rng.integers(0, 256, (1, rows, depth), dtype=np.uint8)
    b, other = (rng.integers(-128, 128, (1, depth, columns), dtype=np.int8) for _ in range(2))
    packed, colsum = kernels.pack_b_batches(b.view(np.uint8), False, 1)
    narrowed = kernels.narrow_panels(kernels.pack_b_batches(other.view(np.uint8), False, 1)[0])
    panel_columns = kernels.tile_shape()[1]
    values = -(-columns // panel_columns) * panel_columns * -(-depth // 4) * 4
    # Panels of bytes have no narrowed copy; int16 panels narrow to half.
    assert packed.shape[1] == values * (1 if narrowed is None else 2)
    if narrowed is None:
        return
    assert narrowed.shape == (1, values)
    index = np.zeros(1, np.int64)
    out = np.empty((1, rows, 4 * columns), np.uint8)
    kernels.matmul(a, False, index, packed, colsum, index, columns, np.zeros(rows, np.int32),
                   np.zeros(columns, np.int32), np.ones((1, columns), np.float32),
                   np.zeros((1, columns), np.int32), out, 0, 0, 2, True, b_narrow=narrowed)
    read = other if rows <= kernels.NARROW_MAX_ROWS else b
    assert np.array_equal(out.view(np.int32)[0], a[0].astype(np.int64) @ read[0])
    with pytest.raises(ValueError, match="narrowed"):
        kernels.matmul(a, False, index, packed, colsum, index, columns,
                       np.zeros(rows, np.int32), np.zeros(columns, np.int32),
                       np.ones((1, columns), np.float32), np.zeros((1, columns), np.int32), out,
                       0, 0, 2, True, b_narrow=narrowed[:, 1:])


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("b_type", TYPES)
def test_one_or_two_rows_on_a_compiled_b(variant, b_type, monkeypatch):
    """A compiled B's product of one or two rows (a classifier's, which reads
    the narrowed panels where the variant packs int16): K of one group, of
    several of the widening's chunks (300), and of two blocks or more (the
    variant's block and 76 k); N ending in a partial panel; a batch of three
    B matrices, each its own stretch of the panels; 1 and 2 threads; the
    exact products (MATRIX_MULTIPLY_INTEGER, against int64 NumPy) and the
    requantized ones (QUANTIZED_LINEAR_MATRIX_MULTIPLY, against the
    reference)."""
    monkeypatch.setattr(_simd, "_selected", variant)
    monkeypatch.setattr(_native, "WORK_PER_THREAD", 1)
    rng = np.random.default_rng(7)
    for depth in (3, 300, _simd.module(variant).K_BLOCK + 76):
        for rows in (1, 2):
            a = random_values(rng, (3, rows, depth), np.uint8)
            b = random_values(rng, (3, depth, 70), b_type)
            a_zero, b_zero = random_values(rng, (), np.uint8), random_values(rng, (), b_type)
            exact = qops.compile("MATRIX_MULTIPLY_INTEGER", b=b, a_zero_point=a_zero,
                                 b_zero_point=b_zero)
            expected = (a.astype(np.int64) - int(a_zero)) @ (b.astype(np.int64) - int(b_zero))
            slots = dict(a=a, a_scale=np.float32(0.03), a_zero_point=a_zero, b=b,
                         b_scale=np.float32(0.02), b_zero_point=b_zero,
                         output_scale=np.float32(0.05 * depth ** 0.5),
                         output_zero_point=random_values(rng, (), np.uint8))
            requantized = qops.compile("QUANTIZED_LINEAR_MATRIX_MULTIPLY",
                                       **{name: value for name, value in slots.items()
                                          if name != "a"})
            wanted = reference(matmul.prepare(slots, {}, "4_0"))
            for n_threads in (1, 2):
                assert np.array_equal(exact(a, n_threads=n_threads), expected), (depth, rows)
                assert np.array_equal(requantized(a, n_threads=n_threads), wanted), (depth, rows)


def _range_finish(costs, threads):
    """The pool's range scheduling (include/qops_pool.h, qops_run_range with
    grain 1), stated on its own: thread t's home segment is jobs
    [count t / threads, count (t + 1) / threads); a free thread takes half
    of what is left (rounded up) of its own segment, then of the others' in
    turn; the thread free first goes first (the lowest on a tie).  Returns
    when the last job ends."""
    count = len(costs)
    threads = min(threads, count)
    front = [count * t // threads for t in range(threads)]
    end = [count * (t + 1) // threads for t in range(threads)]
    free_at, turn = [0] * threads, [0] * threads
    finish = 0
    while any(step < threads for step in turn):
        first = min((t for t in range(threads) if turn[t] < threads),
                    key=lambda t: (free_at[t], t))
        while turn[first] < threads:
            segment = (first + turn[first]) % threads
            left = end[segment] - front[segment]
            if left > 0:
                size = (left + 1) // 2
                free_at[first] += sum(costs[front[segment]:front[segment] + size])
                front[segment] += size
                break
            turn[first] += 1
        if turn[first] == threads:
            finish = max(finish, free_at[first])
    return finish


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_band_search_times_units_as_the_pool_shares_them_out(variant):
    """unit_band's model of the pool (pool_finish) against the scheduling
    stated here: random costs, 1 to 8 threads, 1 to 40 jobs."""
    kernels = _simd.module(variant)
    rng = np.random.default_rng(8)
    for _ in range(300):
        count, threads = int(rng.integers(1, 41)), int(rng.integers(1, 9))
        costs = rng.integers(1, 100, count).tolist()
        assert kernels.pool_finish_of(costs, threads) == _range_finish(costs, threads), (
            costs, threads)
    # Two columns of units of 128 and 32 columns, 9 micro-tiles each: one
    # thread a column ends at the wider's cost.
    assert kernels.pool_finish_of([9 * 8 + 2, 9 * 2 + 2], 2) == 74
    with pytest.raises(ValueError):
        kernels.pool_finish_of([1] * 3, 9)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("b_zero", ["zero", "per column"])
def test_few_units_on_a_compiled_b_share_out_in_lower_bands(variant, b_zero, monkeypatch):
    """A product of a compiled B (packed before the call) with few units of
    work runs its rows in lower bands of micro-tiles where the threads then
    share the work out more evenly (unit_band): 49 rows by 160 columns
    (columns of units of 128 and 32 where panels are 64 wide), by 320, 96
    rows by 160, and 7 and 130 rows; K of 960 (one block) and of two blocks
    or more.  A zero point of B needs the sums of A's rows, which each band
    sums for itself (its state is its first micro-tile's).  Exact on 1 to 4
    threads, and at least one case runs a lower band on two or three."""
    kernels = _simd.module(variant)
    monkeypatch.setattr(_simd, "_selected", variant)
    monkeypatch.setattr(_native, "WORK_PER_THREAD", 1)
    rng = np.random.default_rng(49)
    lower = set()
    for depth in (960, kernels.K_BLOCK + 76):
        for rows, columns in ((49, 160), (49, 320), (96, 160), (7, 160), (130, 96)):
            zero_shape = (1, columns) if b_zero == "per column" else ()
            slots = dict(a=random_values(rng, (rows, depth), np.uint8), a_scale=np.float32(0.03),
                         a_zero_point=random_values(rng, (), np.uint8),
                         b=random_values(rng, (depth, columns), np.int8),
                         b_scale=np.float32(0.02),
                         b_zero_point=(rng.integers(-128, 128, zero_shape).astype(np.int8)
                                       if b_zero == "per column" else np.int8(0)),
                         output_scale=np.float32(0.3 * depth ** 0.5),
                         output_zero_point=random_values(rng, (), np.uint8))
            compiled = qops.compile("QUANTIZED_LINEAR_MATRIX_MULTIPLY",
                                    **{name: value for name, value in slots.items()
                                       if name != "a"})
            for n_threads in (1, 2, 3, 4):
                band, tile_m_panels = kernels.unit_band_of(rows, columns, depth, 1, n_threads)
                assert 1 <= band <= tile_m_panels
                if band < tile_m_panels:
                    lower.add((rows, columns, n_threads))
                # A new A each call: sums left from the last would not do.
                slots["a"] = random_values(rng, (rows, depth), np.uint8)
                wanted = reference(matmul.prepare(slots, {}, "4_0"))
                got = compiled(slots["a"], n_threads=n_threads)
                assert np.array_equal(got, wanted), (depth, rows, columns, n_threads)
    assert any(n_threads in (2, 3) for _, _, n_threads in lower), lower
    # One thread, or more than the search weighs (its cost grows with them):
    # whole bands, and the same bytes on 17 threads.
    for n_threads in (1, 17, 300):
        assert kernels.unit_band_of(49, 160, 960, 1, n_threads)[0] == tile_m_panels
    assert np.array_equal(compiled(slots["a"], n_threads=17), wanted)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("b_type", TYPES)
@pytest.mark.parametrize("depth", [9, 64, "two blocks"])
def test_b_packed_during_the_run(variant, b_type, depth, monkeypatch):
    """B given as it is is packed by the units that read it, a column tile
    at a time: one B shared by six products (every unit of a tile but the
    first finds it packed, or waits while another thread packs it), or one B
    per product; N = 300 ends in a partial tile and panel, and N = 196 (a
    14 x 14 image's pixels) has its panels shared evenly between two columns
    of units, the second starting inside what a whole TILE_COLUMNS would
    cover; K = 9 ends in a partial group, 1100 (or the variant's block and
    76 k, where that is more) spans two K blocks or more.  A second call on
    new values of B in the same workspace must pack them afresh."""
    monkeypatch.setattr(_native, "WORK_PER_THREAD", 1)
    if depth == "two blocks":
        depth = max(1100, _simd.module(variant).K_BLOCK + 76)
    rng = np.random.default_rng(depth)
    for b_batch, n in ((1, 300), (6, 300), (1, 196)):
        for _ in range(2):
            slots = dict(a=random_values(rng, (6, 20, depth), np.uint8), a_scale=0.03,
                         a_zero_point=random_values(rng, (), np.uint8),
                         b=random_values(rng, (b_batch, depth, n), b_type),
                         b_scale=rng.uniform(0.01, 0.03, (1, n)).astype(np.float32),
                         b_zero_point=random_values(rng, (1, n), b_type),
                         output_scale=np.float32(30.0),
                         output_zero_point=random_values(rng, (), np.int8))
            exact_on_one_and_two_threads(slots, variant, (b_batch, n))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("a_type", TYPES)
@pytest.mark.parametrize("depth", [9, 64, "two blocks"])
@pytest.mark.parametrize("b_zero", ["per tensor", "per column"])
def test_row_sums_during_the_run(variant, a_type, depth, b_zero, monkeypatch):
    """A zero point of B needs the sums of A's rows, summed by the units
    that need them, a band of rows at a time: one A shared by six products
    (every unit of a band but the first finds it summed, or waits while
    another thread sums it) or one A per product; M = 130 is three bands,
    the last short; N = 300 is three column tiles per band; K = 9 ends in a
    partial group, 1100 (or the variant's block and 76 k, where that is
    more) spans two K blocks or more.  One zero point for every column goes
    into the row terms, one per column multiplies each value.  A second call on new values of A in the same
    workspace must sum them afresh."""
    monkeypatch.setattr(_native, "WORK_PER_THREAD", 1)
    if depth == "two blocks":
        depth = max(1100, _simd.module(variant).K_BLOCK + 76)
    rng = np.random.default_rng(depth)
    zero_shape = () if b_zero == "per tensor" else (1, 300)
    for a_batch in (1, 6):
        for _ in range(2):
            slots = dict(a=random_values(rng, (a_batch, 130, depth), a_type), a_scale=0.03,
                         a_zero_point=random_values(rng, (), a_type),
                         b=random_values(rng, (6, depth, 300), np.uint8),
                         b_scale=np.float32(0.02),
                         b_zero_point=rng.integers(1, 256, zero_shape).astype(np.uint8),
                         output_scale=np.float32(0.6 * depth),  # most outputs inside int8
                         output_zero_point=random_values(rng, (), np.int8))
            exact_on_one_and_two_threads(slots, variant, a_batch)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("per_row", [False, True])
@pytest.mark.parametrize("shape", [(13, 100), (12, 128), (61, 300), (5, 7)])
def test_outputs_written_in_place_stay_inside_the_output(variant, per_row, shape):
    """Units whose whole micro-tiles lie inside a row-major output are
    requantized straight into it; the others (rows past M or columns past N
    in a tile) go through the scratch.  Bytes either side of the output, in
    the same buffer, must keep their values, and the output must be exact."""
    kernels = _simd.module(variant)
    rows, columns = shape
    depth = 40
    rng = np.random.default_rng(rows * columns)
    a = random_values(rng, (1, rows, depth), np.uint8)
    b = random_values(rng, (1, depth, columns), np.int8)
    a_zero, b_zero = 3, np.int32(0)
    multiplier = rng.uniform(0.002, 0.004, (rows if per_row else 1, 1 if per_row else columns))
    out_zero = rng.integers(-20, 20, multiplier.shape).astype(np.int32)
    sums = (a[0].astype(np.int64) - a_zero) @ b[0].astype(np.int64)
    scaled = sums.astype(np.float32) * multiplier.astype(np.float32)
    expected = np.clip(np.rint(scaled).astype(np.int64) + out_zero, 0, 255)
    index = np.zeros(1, np.int64)
    guard = 4096
    for n_threads in (1, 2):
        buffer = np.full(rows * columns + 2 * guard, 0xA5, np.uint8)
        out = buffer[guard:guard + rows * columns].reshape(1, rows, columns)
        kernels.matmul(a, False, index, None, None, index, columns,
                       np.full(rows, a_zero, np.int32), np.full(1 if per_row else columns, b_zero,
                                                                np.int32),
                       multiplier.astype(np.float32), out_zero, out, 0, 255, n_threads,
                       per_row=per_row, b_source=b.view(np.uint8), b_source_flip=False)
        assert (buffer[:guard] == 0xA5).all() and (buffer[-guard:] == 0xA5).all(), n_threads
        assert np.array_equal(out[0].astype(np.int64), expected), n_threads


def test_small_products_run_on_fewer_threads(monkeypatch):
    per_thread = 1 << 20
    monkeypatch.setattr(_native, "WORK_PER_THREAD", per_thread)
    assert _native.threads_for(0, 8) == 1
    assert _native.threads_for(per_thread - 1, 8) == 1
    assert _native.threads_for(3 * per_thread, 8) == 3
    assert _native.threads_for(100 * per_thread, 2) == 2
    assert _native.threads_for(100 * per_thread, 1) == 1


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("out_type", TYPES)
@pytest.mark.parametrize("depth", [100, "two blocks"])
def test_requantization_ties_and_saturation(variant, out_type, depth):
    """Multipliers of 2**-j make every odd sum a tie, which rounds to even,
    and the large sums saturate at both ends of the output type; per-column
    scales and zero points of B, one zero point of A (the epilogue that takes
    whole micro-tiles).  Checked against the rule stated here in NumPy:
    float32(sum) * multiplier, round half to even, add the zero point, clip.
    K = 1500 (or the variant's block and 476 k, where that is more) spans
    two K blocks or more."""
    if depth == "two blocks":
        depth = max(1500, _simd.module(variant).K_BLOCK + 476)
    rng = np.random.default_rng(depth)
    rows, columns = 50, 70
    a = random_values(rng, (rows, depth), np.uint8)
    b = random_values(rng, (depth, columns), np.int8)
    a_zero, out_zero = 7, random_values(rng, (), out_type)
    b_zero = random_values(rng, (1, columns), np.int8)
    # Output scale 2**(j + 1) over b_scale 2**-j (j = 0 .. 3): multiplier 2**-1 .. 2**-7.
    b_scale = (2.0 ** -rng.integers(0, 4, (1, columns))).astype(np.float32)
    output_scale = np.float32(2.0 ** 1) if depth == 100 else np.float32(2.0 ** 9)
    call = matmul.prepare(dict(a=a, a_scale=np.float32(1.0), a_zero_point=np.uint8(a_zero), b=b,
                               b_scale=b_scale, b_zero_point=b_zero, output_scale=output_scale,
                               output_zero_point=out_zero), {}, "4_0")
    sums = (a.astype(np.int64) - a_zero) @ (b.astype(np.int64) - b_zero.astype(np.int64))
    multiplier = (b_scale / output_scale).astype(np.float32)
    scaled = sums.astype(np.float32) * multiplier
    info = np.iinfo(out_type)
    expected = np.clip(np.rint(scaled).astype(np.int64) + int(out_zero), info.min, info.max)
    assert np.any(scaled == np.floor(scaled) + 0.5), "the case has no ties"
    assert np.any(expected == info.min) and np.any(expected == info.max), "nothing saturates"
    for n_threads in (1, 2):
        got = run_variant(_native.run_matmul, call, variant, n_threads)
        assert np.array_equal(got.astype(np.int64), expected)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("out_type", TYPES)
@pytest.mark.parametrize("b_zero", [0, 200])
@pytest.mark.parametrize("reach", [0.5, 0.999, 1.0, 2.5])
def test_the_epilogue_shortcuts_hold_to_their_bound(variant, out_type, b_zero, reach):
    """Sums at the bound the epilogue reasons with, K * 255 * 255 in
    magnitude (a = 255 or 0 against b - b_zp = 255, or -200 with B's zero
    point 200), scaled to
    `reach` times 2**30: below 1 the saturating packs clamp, from 1 the
    float clamp must (at 2.5 the scaled sums are past int32, where an
    unclamped conversion gives its invalid value).  B's zero point 0 leaves
    out the column-zero product; 200 needs it.  Against the rule in NumPy."""
    depth, rows, columns = 64, 12, 32
    b_high = 255 if b_zero == 0 else 0   # b - b_zp = +255, or -200
    a = np.zeros((rows, depth), np.uint8)
    a[::2] = 255
    b = np.full((depth, columns), b_high, np.uint8)
    b[:, ::3] = b_zero   # some columns sum to 0
    sums = a.astype(np.int64) @ (b.astype(np.int64) - b_zero)
    bound = depth * 255.0 * 255.0
    multiplier = np.float32(reach * 2.0**30 / bound)
    out_zero = random_values(np.random.default_rng(1), (), out_type)
    call = matmul.prepare(dict(a=a, a_scale=np.float32(1.0), a_zero_point=np.uint8(0), b=b,
                               b_scale=multiplier, b_zero_point=np.uint8(b_zero),
                               output_scale=np.float32(1.0), output_zero_point=out_zero),
                          {}, "4_0")
    scaled = sums.astype(np.float32) * multiplier
    info = np.iinfo(out_type)
    expected = np.clip(np.rint(scaled.astype(np.float64)) + int(out_zero), info.min, info.max)
    assert np.abs(scaled).max() >= reach * 2.0**30 * (200 / 255 if b_zero else 1) * 0.99
    for n_threads in (1, 2):
        got = run_variant(_native.run_matmul, call, variant, n_threads)
        assert np.array_equal(got.astype(np.int64), expected.astype(np.int64))


def _per_row_statement(a, row_zero, b, column_zero, bias, multiplier, out_zero):
    """A pointwise product's bytes, stated in NumPy: A' (M x K, uint8) less its
    row's zero point times B' (K x N, the bytes as int8) less the one column
    zero point, plus the row's bias, float32 times the row's multiplier,
    rounded half to even, plus the row's zero point, saturated to uint8."""
    sums = ((a.astype(np.int64) - row_zero[:, None])
            @ (b.view(np.int8).astype(np.int64) - column_zero[0]) + bias[:, None])
    scaled = sums.astype(np.float32) * multiplier.reshape(-1, 1)
    return np.clip(np.rint(scaled) + out_zero.reshape(-1, 1), 0, 255).astype(np.uint8)


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_bound_product_runs_each_new_operand_and_checks_its_shape(variant):
    """BoundProduct (a product checked and described once): each call's B
    source, or each call's A, gives the stated product, on one and two
    threads and from two Python threads at once; an operand or output of
    another shape is refused before the run."""
    from conftest import run_in_threads

    kernels = _simd.module(variant)
    rng = np.random.default_rng(21)
    m, k, n = 40, 37, 150
    a = rng.integers(0, 256, (1, m, k), dtype=np.uint8)
    row_zero = rng.integers(0, 256, m).astype(np.int32)
    column_zero = np.array([-5], np.int32)
    multiplier = rng.uniform(1e-4, 3e-4, (m, 1)).astype(np.float32)
    out_zero = rng.integers(0, 256, (m, 1)).astype(np.int32)
    bias = rng.integers(-5000, 5000, m).astype(np.int64)
    index = np.zeros(1, np.int64)
    per_row = (row_zero, column_zero, multiplier, out_zero)
    product = kernels.BoundProduct(a, False, index, None, None, index, n, *per_row, 1, 0, 255,
                                   False, True, bias, None, (1, k, n), False,
                                   a_packed_once=True)
    images = [rng.integers(0, 256, (1, k, n), dtype=np.uint8) for _ in range(4)]
    for n_threads, image in zip((1, 2, 1, 2), images):
        out = np.empty((1, m, n), np.uint8)
        product.run(None, image, out, n_threads)
        assert np.array_equal(out[0], _per_row_statement(a[0], row_zero, image[0], column_zero,
                                                         bias, multiplier, out_zero))
    outs = [np.empty((1, m, n), np.uint8) for _ in images]
    run_in_threads(lambda i: [product.run(None, images[i], outs[i], 2) for _ in range(20)], 4)
    for image, out in zip(images, outs):
        assert np.array_equal(out[0], _per_row_statement(a[0], row_zero, image[0], column_zero,
                                                         bias, multiplier, out_zero))
    for image, out in (((1, k + 1, n), (1, m, n)), ((1, k, n), (1, m, n - 1)),
                       ((1, k, n), (2, m, n))):
        with pytest.raises(ValueError, match="do not cover"):
            product.run(None, np.zeros(image, np.uint8), np.zeros(out, np.uint8), 1)
    # Each call's A against a constant B, its row sums made in the run.
    b = rng.integers(0, 256, (1, k, n), dtype=np.uint8)
    packed_b, colsum = kernels.pack_b_batches(b, False, 1)
    column = np.zeros(n, np.int32) + column_zero[0]
    by_a = kernels.BoundProduct(a, False, index, packed_b, colsum, index, n, np.zeros(m, np.int32),
                                column, np.full((1, n), 2e-4, np.float32),
                                np.full((1, n), 7, np.int32), 1, 0, 255, a_per_call=True)
    for n_threads in (1, 2):
        rows = rng.integers(0, 256, (1, m, k), dtype=np.uint8)
        out = np.empty((1, m, n), np.uint8)
        by_a.run(rows, None, out, n_threads)
        expected = _per_row_statement(rows[0], np.zeros(m, np.int32), b[0],
                                      column_zero, np.zeros(m, np.int64),
                                      np.full(m, 2e-4, np.float32), np.full(m, 7, np.int32))
        assert np.array_equal(out[0], expected)
    with pytest.raises(ValueError, match="do not cover"):
        by_a.run(np.zeros((1, m, k + 1), np.uint8), None, np.empty((1, m, n), np.uint8), 1)
    with pytest.raises(ValueError, match="row sums"):
        kernels.BoundProduct(a, False, index, packed_b, colsum, index, n, *per_row, 1, 0, 255,
                             False, True, bias, np.zeros((1, m), np.int64), a_per_call=True)


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_bound_product_makes_fresh_outputs_of_the_operands_it_takes(variant):
    """run_fresh (a compiled convolution's call after call): a new output of
    the shape and dtype set_output gave, the same bytes as run for each
    call's B source and for each call's A; None, with nothing run, for an
    operand it does not take as it is (another type, a strided view, other
    bytes, wider items), so the caller takes run instead."""
    kernels = _simd.module(variant)
    rng = np.random.default_rng(22)
    m, k, n = 24, 19, 70
    a = rng.integers(0, 256, (1, m, k), dtype=np.uint8)
    row_zero = rng.integers(0, 256, m).astype(np.int32)
    per_row = (row_zero, np.array([3], np.int32),
               rng.uniform(1e-4, 3e-4, (m, 1)).astype(np.float32),
               rng.integers(0, 256, (m, 1)).astype(np.int32))
    bias = rng.integers(-5000, 5000, m).astype(np.int64)
    index = np.zeros(1, np.int64)
    by_source = kernels.BoundProduct(a, False, index, None, None, index, n, *per_row, 1, 0, 255,
                                     False, True, bias, None, (1, k, n), False,
                                     a_packed_once=True)
    assert by_source.run_fresh(np.zeros((1, k, n), np.uint8), 1) is None  # no set_output yet
    by_source.set_output((1, m, 10, 7), np.int8, 2)
    for n_threads in (1, 2):
        image = rng.integers(0, 256, (1, k, 10, 7), dtype=np.uint8)
        fresh = by_source.run_fresh(image, n_threads)
        assert fresh.shape == (1, m, 10, 7) and fresh.dtype == np.int8
        out = np.empty((1, m, n), np.uint8)
        by_source.run(None, image.reshape(1, k, n), out, n_threads)
        assert np.array_equal(fresh.view(np.uint8).reshape(1, m, n), out)
        assert np.array_equal(out[0], _per_row_statement(a[0], row_zero, image.reshape(k, n),
                                                         per_row[1], bias, per_row[2],
                                                         per_row[3]))
    wide = np.zeros((1, k, 2 * n), np.uint8)
    for refused in (wide[:, :, ::2], np.zeros((1, k, n + 1), np.uint8),
                    np.zeros((1, k, n // 2), np.uint16), wide.tolist()):
        assert by_source.run_fresh(refused, 1) is None
    with pytest.raises(ValueError, match="does not hold"):
        by_source.set_output((1, m, n + 1), np.uint8, 1)
    # A refused output shape leaves the one set before.
    image = rng.integers(0, 256, (1, k, n), dtype=np.uint8)
    out = np.empty((1, m, n), np.uint8)
    by_source.run(None, image, out, 1)
    assert np.array_equal(by_source.run_fresh(image, 1).view(np.uint8).reshape(1, m, n), out)
    unset = kernels.BoundProduct(a, False, index, None, None, index, n, *per_row, 1, 0, 255,
                                 False, True, bias, None, (1, k, n), False)
    with pytest.raises(ValueError, match="does not hold"):
        unset.set_output((m, n - 1), np.uint8, 1)
    assert unset.run_fresh(image, 1) is None  # still no output set
    b = rng.integers(0, 256, (1, k, n), dtype=np.uint8)
    packed_b, colsum = kernels.pack_b_batches(b, False, 1)
    by_a = kernels.BoundProduct(a, False, index, packed_b, colsum, index, n,
                                np.zeros(m, np.int32), np.full(n, 3, np.int32),
                                np.full((1, n), 2e-4, np.float32), np.full((1, n), 7, np.int32),
                                1, 0, 255, a_per_call=True)
    by_a.set_output((m, n), np.uint8, 2)
    rows = rng.integers(0, 256, (1, m, k), dtype=np.uint8)
    out = np.empty((1, m, n), np.uint8)
    by_a.run(rows, None, out, 2)
    assert np.array_equal(by_a.run_fresh(rows, 2), out[0])
    assert by_a.run_fresh(np.asfortranarray(rows[0]), 2) is None
