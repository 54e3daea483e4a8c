"""``qops.quantized_linear_average_pooling`` against the rule written out here
(window by window in Python integers and floats), onnxruntime's
com.microsoft QLinearAveragePool and QLinearGlobalAveragePool through
``qops.onnx`` (a peer by the rule of tests/peers.py), and the validation."""

import itertools

import numpy as np
import pytest
from conftest import contrib_model, judge, run_contrib_ort
from hypothesis import given, settings
from hypothesis import strategies as st

import qops
from qops.backends import dispatch
from qops.backends.native import pooling as _pooling_native
from qops.backends.native import variants as _simd
from qops.ops.pooling import prepare


def stated(x, x_scale, x_zero, y_scale, y_zero, *, window, strides, dilations, start, end,
           include_padding, out_dtype):
    """The rule, one output element at a time: S the exact sum of x - x_zero
    over the window's elements inside the input, count their number (every
    window element with include_padding), S * x_scale / (y_scale * count) in
    float64 (Python floats), ties to even, + y_zero, saturated."""
    channels = x.shape[1]
    spatial = x.shape[2:]
    per = lambda v: [float(e) for e in np.broadcast_to(np.asarray(v).reshape(-1), (channels,))]  # noqa: E731
    xs, ys = per(x_scale), per(y_scale)
    xz = [int(e) for e in np.broadcast_to(np.asarray(x_zero).reshape(-1), (channels,))]
    yz = [int(e) for e in np.broadcast_to(np.asarray(y_zero).reshape(-1), (channels,))]
    out_size = [(n + a + b - (d * (w - 1) + 1)) // s + 1
                for n, w, s, d, a, b in zip(spatial, window, strides, dilations, start, end)]
    info = np.iinfo(out_dtype)
    result = np.empty(x.shape[:2] + tuple(out_size), out_dtype)
    values = x.astype(np.int64)
    for n in range(x.shape[0]):
        for c in range(channels):
            for position in itertools.product(*(range(o) for o in out_size)):
                total = count = 0
                for offset in itertools.product(*(range(w) for w in window)):
                    index = tuple(p * s - a + k * d for p, s, a, k, d in
                                  zip(position, strides, start, offset, dilations))
                    if all(0 <= i < size for i, size in zip(index, spatial)):
                        total += int(values[(n, c) + index]) - xz[c]
                        count += 1
                if include_padding:
                    count = int(np.prod(window))
                value = total * xs[c] / (ys[c] * count)
                result[(n, c) + position] = min(max(round(value) + yz[c], info.min), info.max)
    return result


@st.composite
def calls(draw):
    dtype = np.dtype(draw(st.sampled_from([np.uint8, np.int8])))
    info = np.iinfo(dtype)
    spatial = draw(st.sampled_from([2, 3]))
    window = tuple(draw(st.integers(1, 3)) for _ in range(spatial))
    strides = tuple(draw(st.integers(1, 3)) for _ in range(spatial))
    dilations = tuple(draw(st.integers(1, 2)) for _ in range(spatial))
    start = tuple(draw(st.integers(0, w - 1)) for w in window)
    end = tuple(draw(st.integers(0, w - 1)) for w in window)
    sizes = tuple(max(1, d * (w - 1) + 1 - a - b) + draw(st.integers(0, 5))
                  for w, d, a, b in zip(window, dilations, start, end))
    channels = draw(st.integers(1, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = rng.integers(info.min, info.max + 1, (draw(st.integers(1, 2)), channels) + sizes)
    per_channel = draw(st.booleans())
    count = channels if per_channel else 1
    call = dict(input=x.astype(dtype),
                input_scale=rng.uniform(0.005, 0.05, count).astype(np.float32),
                input_zero_point=rng.integers(info.min, info.max + 1, count).astype(dtype),
                output_scale=rng.uniform(0.005, 0.05, count).astype(np.float32),
                output_zero_point=rng.integers(info.min, info.max + 1, count).astype(dtype))
    if not per_channel:
        call = {k: (v.reshape(()) if k != "input" else v) for k, v in call.items()}
    attributes = dict(window_size=window, strides=strides, dilations=dilations,
                      start_padding=start, end_padding=end,
                      include_padding=draw(st.booleans()))
    return call, attributes


def _expected(call, attributes):
    return stated(call["input"], call["input_scale"], call["input_zero_point"],
                  call["output_scale"], call["output_zero_point"],
                  window=attributes["window_size"], strides=attributes["strides"],
                  dilations=attributes["dilations"], start=attributes["start_padding"],
                  end=attributes["end_padding"], include_padding=attributes["include_padding"],
                  out_dtype=call["input"].dtype)


@settings(max_examples=80, deadline=None)
@given(case=calls(), n_threads=st.sampled_from([1, 2]))
def test_equals_the_stated_rule(case, n_threads):
    call, attributes = case
    try:
        got = qops.quantized_linear_average_pooling(**call, **attributes, n_threads=n_threads)
    except qops.ValidationError as error:
        # Only a window wholly in the padding is refused here.
        assert "wholly in the padding" in str(error) and not attributes["include_padding"]
        return
    want = _expected(call, attributes)
    assert got.dtype == want.dtype and np.array_equal(got, want)


@settings(max_examples=40, deadline=None)
@given(case=calls())
def test_the_kernel_equals_the_reference(case):
    call, attributes = case
    try:
        validated = prepare(call, attributes)
    except qops.ValidationError:
        return
    assert dispatch.select(validated).name == "kernels"
    want = dispatch.execute(validated, 1, implementation="reference")
    for n_threads in (1, 2):
        assert np.array_equal(dispatch.execute(validated, n_threads), want)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("shape", [(2, 5, 9, 9), (1, 3, 7, 7), (2, 4, 11), (1, 2, 4, 5, 6)])
def test_global_pooling_is_the_whole_window(dtype, shape):
    """A window of the whole image (QLinearGlobalAveragePool) on the kernel's
    plane-sum path, against the stated rule."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(1)
    x = rng.integers(info.min, info.max + 1, shape if len(shape) > 3 else shape[:2] + (1,)
                     + shape[2:]).astype(dtype)
    got = qops.quantized_linear_average_pooling(x, 0.0173, dtype(5), 0.0123, dtype(3),
                                                window_size=x.shape[2:])
    want = stated(x, np.float32(0.0173), 5, np.float32(0.0123), 3, window=x.shape[2:], strides=(1,) * (x.ndim - 2),
                  dilations=(1,) * (x.ndim - 2), start=(0,) * (x.ndim - 2),
                  end=(0,) * (x.ndim - 2), include_padding=False, out_dtype=dtype)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("variant", _simd.quantize_variants())
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("shape, attributes", [
    # A global pooling of 140 planes of 49 bytes: runs of planes cut at 64
    # and where the batch member ends (70 channels).
    ((2, 70, 7, 7), dict(window_size=(7, 7))),
    # ResNet's 3 x 3 over 56 columns: whole blocks of the short-row loops.
    ((1, 3, 56, 56), dict(window_size=(3, 3), start_padding=(1, 1), end_padding=(1, 1))),
    ((1, 2, 57, 61), dict(window_size=(3, 3), strides=(2, 2), dilations=(2, 2),
                          start_padding=(2, 1), end_padding=(0, 3), include_padding=True)),
    ((1, 2, 57, 61), dict(window_size=(3, 3), strides=(2, 2), dilations=(2, 2),
                          start_padding=(2, 1), end_padding=(0, 3))),
    ((1, 2, 30, 40), dict(window_size=(1, 7), strides=(1, 3), start_padding=(0, 3),
                          end_padding=(0, 5))),
    ((1, 2, 5, 20, 37), dict(window_size=(2, 3, 3), strides=(1, 2, 1),
                             start_padding=(1, 1, 1), end_padding=(0, 1, 2))),
    # Past the size that runs on one thread: a global pooling of 800 planes
    # (runs cut at 64 and at each member's 100 channels), a strided dilated
    # pooling, batches of a plain one.
    ((8, 100, 7, 7), dict(window_size=(7, 7))),
    ((1, 4, 90, 97), dict(window_size=(3, 3), strides=(2, 2), dilations=(2, 2),
                          start_padding=(1, 2), end_padding=(2, 1))),
    ((2, 3, 61, 64), dict(window_size=(2, 3), strides=(1, 1), start_padding=(1, 2),
                          end_padding=(0, 2))),
    # Windows wholly in the padding (counted with include_padding), start
    # padding wider than the image, one output column.
    ((1, 2, 4, 3), dict(window_size=(5, 6), start_padding=(4, 5), end_padding=(4, 5),
                        include_padding=True)),
    ((1, 2, 9, 5), dict(window_size=(3, 5))),
])
@pytest.mark.parametrize("per_channel", [True, False])
def test_every_variant_pools_long_rows_as_the_reference(variant, dtype, shape, attributes,
                                                        per_channel):
    """The kernels of every quantize variant on rows and planes longer than
    the vectors of their loops and the odd geometries, per-channel and
    per-tensor parameters, against the NumPy reference, on one thread and
    two."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(len(shape) + shape[-1])
    count = shape[1] if per_channel else 1
    call = dict(input=rng.integers(info.min, info.max + 1, shape).astype(dtype),
                input_scale=rng.uniform(0.005, 0.05, count).astype(np.float32),
                input_zero_point=rng.integers(info.min, info.max + 1, count).astype(dtype),
                output_scale=rng.uniform(0.005, 0.05, count).astype(np.float32),
                output_zero_point=rng.integers(info.min, info.max + 1, count).astype(dtype))
    if not per_channel:
        call = {name: (value.reshape(()) if name != "input" else value)
                for name, value in call.items()}
    validated = prepare(call, attributes)
    want = dispatch.execute(validated, 1, implementation="reference")
    prepared = _pooling_native.prepare_average_pooling(validated, variant)
    for n_threads in (1, 2):
        got = np.empty_like(want)
        prepared.run_once(validated, got, n_threads)
        assert np.array_equal(got, want), n_threads


def test_a_call_like_the_last_follows_its_data_and_attributes(monkeypatch):
    """Calls with the same parameter objects and new data of the same form
    take the recent-call shortcut (no signature made) and follow the data;
    other attributes, or another parameter, take the validating path, and a
    bad scale is refused there."""
    from qops.ops import plans

    rng = np.random.default_rng(5)
    image = rng.integers(0, 256, (2, 3, 12, 12), dtype=np.uint8)
    parameters = dict(input_scale=np.float32(0.02), input_zero_point=np.uint8(120),
                      output_scale=np.float32(0.03), output_zero_point=np.uint8(128))
    attributes = dict(window_size=(3, 3), start_padding=(1, 1), end_padding=(1, 1))

    def want(window):
        geometry = dict(attributes, window_size=window)
        return stated(image, parameters["input_scale"], 120, parameters["output_scale"], 128,
                      window=window, strides=(1, 1), dilations=(1, 1),
                      start=geometry["start_padding"], end=geometry["end_padding"],
                      include_padding=False, out_dtype=np.uint8)

    qops.quantized_linear_average_pooling(image, **parameters, **attributes)
    signatures = []
    real = plans.signature
    monkeypatch.setattr(plans, "signature", lambda *args: signatures.append(1) or real(*args))
    for _ in range(3):
        image[...] = rng.integers(0, 256, image.shape, dtype=np.uint8)
        got = qops.quantized_linear_average_pooling(image, **parameters, **attributes)
        assert np.array_equal(got, want((3, 3)))
    assert not signatures
    got = qops.quantized_linear_average_pooling(image, **parameters,
                                                **dict(attributes, window_size=(2, 3)))
    assert np.array_equal(got, want((2, 3))) and signatures
    with pytest.raises(qops.ValidationError, match="output_scale"):
        qops.quantized_linear_average_pooling(image, **dict(parameters, output_scale=np.float32(0)),
                                              **attributes)


POOL_INPUTS = ["X", "x_scale", "x_zero_point", "y_scale", "y_zero_point"]


def _model(op_type, x, parameters, attributes):
    return contrib_model(op_type, POOL_INPUTS, dict(parameters, X=x), ("X",), x.dtype,
                         **attributes)


def _onnxruntime(model, x):
    return run_contrib_ort(model, {"X": x}, ("X",))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("shape, attributes", [
    ((2, 8, 14, 14), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])),
    ((2, 8, 14, 14), dict(kernel_shape=[2, 2], auto_pad="SAME_UPPER", count_include_pad=1)),
    ((2, 14, 14, 8), dict(kernel_shape=[3, 3], channels_last=1)),
    ((2, 8, 20), dict(kernel_shape=[3], pads=[1, 2])),
    ((1, 4, 5, 6, 7), dict(kernel_shape=[3, 3, 3], pads=[1] * 6, strides=[2, 2, 2])),
    ((2, 8, 7, 7), "global"),
    ((2, 7, 7, 8), "global channels_last"),
])
def test_qlinear_average_pool_nodes_through_qops_onnx(dtype, shape, attributes):
    """onnxruntime's pooling nodes through run_node and the reference
    evaluator equal the stated rule (on the node's NCHW view); onnxruntime is
    compared where it is exact."""
    pytest.importorskip("onnx")
    import qops.onnx
    from onnx.reference import ReferenceEvaluator

    info = np.iinfo(dtype)
    rng = np.random.default_rng(9)
    x = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    parameters = dict(x_scale=np.float32(0.0173), x_zero_point=dtype(5),
                      y_scale=np.float32(0.0123), y_zero_point=dtype(3))
    if isinstance(attributes, str):
        op_type = "QLinearGlobalAveragePool"
        attributes = {"channels_last": 1} if "channels_last" in attributes else {}
    else:
        op_type = "QLinearAveragePool"
    node, model = _model(op_type, x, parameters, attributes)
    (got,) = qops.onnx.run_node(node, [x] + [parameters[n] for n in
                                             ("x_scale", "x_zero_point", "y_scale",
                                              "y_zero_point")])
    nchw = np.moveaxis(x, -1, 1) if attributes.get("channels_last") else x
    if nchw.ndim == 3:
        nchw = nchw[:, :, None, :]
    spatial = nchw.ndim - 2
    if op_type == "QLinearGlobalAveragePool":
        window, strides, start, end = nchw.shape[2:], (1,) * spatial, (0,) * spatial, (0,) * spatial
    else:
        kernel = tuple(attributes["kernel_shape"])
        strides = tuple(attributes.get("strides", (1,) * len(kernel)))
        pads = attributes.get("pads")
        if attributes.get("auto_pad") == "SAME_UPPER":
            pads = []
            for size, k, s in zip(nchw.shape[2:], kernel, strides):
                total = max(0, (-(-size // s) - 1) * s + k - size)
                pads.append((total // 2, total - total // 2))
            start, end = tuple(p[0] for p in pads), tuple(p[1] for p in pads)
        else:
            pads = pads or [0] * (2 * len(kernel))
            start, end = tuple(pads[:len(kernel)]), tuple(pads[len(kernel):])
        window = kernel
        if len(kernel) == 1:
            window, strides, start, end = (1, *window), (1, *strides), (0, *start), (0, *end)
    want = stated(nchw, parameters["x_scale"], 5, parameters["y_scale"], 3, window=window, strides=strides,
                  dilations=(1,) * spatial, start=start, end=end,
                  include_padding=bool(attributes.get("count_include_pad")), out_dtype=dtype)
    if x.ndim == 3:
        want = want[:, :, 0]
    if attributes.get("channels_last"):
        want = np.moveaxis(want, 1, -1)
    judge(got, want, context=op_type, peer=lambda: _onnxruntime(model, x))
    evaluator = ReferenceEvaluator(model, new_ops=qops.onnx.reference_ops())
    assert np.array_equal(evaluator.run(None, {"X": x})[0], want)


def _call(**changes):
    rng = np.random.default_rng(2)
    call = dict(input=rng.integers(0, 256, (1, 3, 6, 6)).astype(np.uint8), input_scale=0.5,
                output_scale=0.25, window_size=(2, 2))
    call.update(changes)
    return call


@pytest.mark.parametrize("changes, message", [
    (dict(window_size=None), "window_size is required"),
    (dict(window_size=(2, 2, 2)), "a 2-D pooling (input of 4 dimensions) takes 2 values"),
    (dict(start_padding=(2, 2), end_padding=(0, 0)), "wholly in the padding"),
    (dict(window_size=(9, 9)), "is smaller than the dilated window height 9"),
    (dict(input_scale=np.zeros((1, 3, 1, 1), np.float32)), "input_scale has a zero value"),
    (dict(input_zero_point=np.int8(1)), "input and input_zero_point must have the same data type"),
    (dict(input=np.zeros((1, 3, 2, 4, 4), np.uint8), window_size=(1, 2, 2),
          output_scale=np.full((1, 1, 3, 1, 1), 0.25, np.float32)),
     "output_scale has shape (1, 1, 3, 1, 1); expected (1, 1, 1, 1, 1) per-tensor or "
     "(1, 3, 1, 1, 1) per-channel"),
    (dict(output_zero_point=np.zeros(4, np.uint8)),
     "(given as (4,)); expected (1, 1, 1, 1) per-tensor or (1, 3, 1, 1) per-channel"),
    (dict(input=np.zeros((3, 6, 6), np.uint8)), "input has 3 dimensions; "
                                                "DML_FEATURE_LEVEL_6_4 supports 4 to 5"),
    (dict(feature_level="6_1"), "introduced in DML_FEATURE_LEVEL_6_2"),
])
def test_refuses_what_the_page_or_the_rule_does_not_take(changes, message):
    with pytest.raises(qops.ValidationError) as error:
        qops.quantized_linear_average_pooling(**_call(**changes))
    assert message in str(error.value)
    assert str(error.value).startswith("QUANTIZED_LINEAR_AVERAGE_POOLING: ")


def test_per_channel_shapes_and_include_padding():
    """A 1-d parameter of C is per channel; (1, C, 1, 1) and the 5-D form
    mean the same; padding counts in the divisor only with include_padding."""
    x = np.full((1, 2, 2, 2), 8, np.uint8)
    scales = np.array([1.0, 2.0], np.float32)
    forms = [scales, scales.reshape(1, 2, 1, 1), scales.reshape(2, 1, 1)]
    results = [qops.quantized_linear_average_pooling(x, s, None, 1.0, None, window_size=(2, 2),
                                                     start_padding=(1, 1)) for s in forms]
    for result in results:
        assert np.array_equal(result, results[0])
    # Corner windows hold one element: 8 * scale / 1; with padding counted, / 4.
    assert results[0][0, :, 0, 0].tolist() == [8, 16]
    counted = qops.quantized_linear_average_pooling(x, scales, None, 1.0, None, window_size=(2, 2),
                                                    start_padding=(1, 1), include_padding=True)
    assert counted[0, :, 0, 0].tolist() == [2, 4]
