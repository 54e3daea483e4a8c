"""Channels-last tensors between a session's convolutions (qops.onnx._layout):
which tensors the pass keeps (N, H, W, C), and sessions that use them give
the channels-first session's values bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import qops.onnx  # noqa: E402
from qops.onnx import _layout  # noqa: E402
from qops.onnx.session import Step  # noqa: E402


def _step(name, inputs, output, layouts=None):
    """A step whose call records the layouts it was made for."""
    def call(arguments, n_threads):
        raise AssertionError("not run")

    if layouts == "conv":
        def make(input_channels_last, output_channels_last):
            def made(arguments, n_threads):
                raise AssertionError("not run")
            made.made_for = (input_channels_last, output_channels_last)
            return made
        call.layouts = _layout.ConvolutionLayouts(make)
    elif layouts == "add":
        call.layouts = _layout.ElementwiseLayouts((0, 1))
    return Step(name, name, tuple(inputs), (output,), (name,), call)


def _layouts(steps, outputs=("y",), inputs=("x",), constants=("w",)):
    return {step.kind: step.channels_last
            for step in _layout.channels_last(steps, set(inputs), set(outputs), set(constants))}


def test_a_residual_block_between_convolutions_is_channels_last():
    steps = [_step("stem", ["x", "w"], "a", "conv"),
             _step("conv1", ["a", "w"], "b", "conv"),
             _step("conv2", ["b", "w"], "c", "conv"),
             _step("add", ["c", "a"], "d", "add"),
             _step("conv3", ["d", "w"], "e", "conv"),
             _step("pool", ["e"], "y")]
    assert _layouts(steps) == {
        "stem": (False, True),    # reads the graph input, writes the residual stream
        "conv1": (True, True),
        "conv2": (True, True),
        "add": (True, True),
        "conv3": (True, False),   # its output feeds a pooling: channels-first
        "pool": (False, False)}


def test_one_reader_without_layouts_keeps_the_whole_residual_stream_channels_first():
    steps = [_step("conv1", ["x", "w"], "a", "conv"),
             _step("conv2", ["a", "w"], "b", "conv"),
             _step("add", ["b", "a"], "c", "add"),
             _step("conv3", ["c", "w"], "d", "conv"),
             _step("pool", ["a"], "p"),
             _step("concat", ["d", "p"], "y")]
    layouts = _layouts(steps)
    # a is read by the pooling, and the add joins a, b and c into one set.
    assert layouts["conv1"] == (False, False) and layouts["add"] == (False, False)
    assert layouts["conv2"] == (False, False) and layouts["conv3"] == (False, False)


def test_graph_outputs_constants_and_weights_stay_as_the_model_says():
    steps = [_step("conv1", ["x", "w"], "a", "conv"),
             _step("conv2", ["a", "w"], "y", "conv"),
             _step("conv3", ["w", "a"], "z", "conv")]
    layouts = _layouts(steps, outputs=("y", "z"))
    # a is read by conv3 as its weight (input 1), not as its image.
    assert layouts == {"conv1": (False, False), "conv2": (False, False),
                       "conv3": (False, False)}
    steps = [_step("conv1", ["x", "w"], "a", "conv"), _step("conv2", ["a", "w"], "y", "conv")]
    assert _layouts(steps) == {"conv1": (False, True), "conv2": (True, False)}
    assert _layouts(steps, outputs=("y", "a")) == {"conv1": (False, False),
                                                   "conv2": (False, False)}


# -- sessions ------------------------------------------------------------------------------

def _qlinear_conv(nodes, initializers, x, channels, out_channels, rng, name, kernel=1, stride=1):
    weight = rng.integers(-60, 61, (out_channels, channels, kernel, kernel), dtype=np.int8)
    names = {f"{name}_w": weight, f"{name}_ws": np.float32(0.004),
             f"{name}_wz": np.int8(0), f"{name}_b": rng.integers(-500, 500, out_channels,
                                                                 dtype=np.int32)}
    initializers += [numpy_helper.from_array(np.asarray(v), k) for k, v in names.items()]
    pad = kernel // 2
    nodes.append(helper.make_node(
        "QLinearConv", [x, "s", "z", f"{name}_w", f"{name}_ws", f"{name}_wz", "s", "z",
                        f"{name}_b"], [name], name=name, pads=[pad] * 4,
        strides=[stride, stride]))
    return name


def _residual_model(broadcast):
    """QLinearConv -> QLinearConv -> QLinearAdd (with the first) -> QLinearConv,
    64 channels; with ``broadcast`` the add's other operand is a 1 x 1 image
    (a strided convolution of the first's output) that the add broadcasts."""
    rng = np.random.default_rng(3)
    nodes, initializers = [], [numpy_helper.from_array(np.float32(0.05), "s"),
                               numpy_helper.from_array(np.uint8(100), "z")]
    a = _qlinear_conv(nodes, initializers, "x", 64, 64, rng, "conv_a", kernel=3)
    b = _qlinear_conv(nodes, initializers, a, 64, 64, rng, "conv_b")
    other = _qlinear_conv(nodes, initializers, a, 64, 64, rng, "conv_c", stride=8) \
        if broadcast else a
    nodes.append(helper.make_node("QLinearAdd",
                                  [b, "s", "z", other, "s", "z", "s", "z"], ["sum"],
                                  name="add", domain="com.microsoft"))
    _qlinear_conv(nodes, initializers, "sum", 64, 80, rng, "y", kernel=3)
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 64, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize("broadcast", [False, True])
@pytest.mark.parametrize("n_threads", [1, 2])
def test_a_session_on_channels_last_tensors_gives_the_channels_first_values(broadcast,
                                                                            n_threads):
    model = _residual_model(broadcast)
    feeds = {"x": np.random.default_rng(4).integers(0, 256, (1, 64, 8, 8), dtype=np.uint8)}
    session = qops.onnx.InferenceSession(model, n_threads=n_threads)
    first = qops.onnx.InferenceSession(model, n_threads=n_threads, channels_last=False)
    layouts = {step.nodes[0]: step.channels_last for step in session.steps}
    assert layouts["conv_a"] == (False, True) and layouts["add"] == (True, True)
    assert layouts["y"] == (True, False)
    assert not any(any(step.channels_last) for step in first.steps)
    for _ in range(2):  # the second run on the bound kernels
        (got,) = session.run(None, feeds)
        (want,) = first.run(None, feeds)
        assert got.shape == (1, 80, 8, 8) and got.flags.c_contiguous
        np.testing.assert_array_equal(got, want)
    (literal,) = qops.onnx.InferenceSession(model, n_threads=n_threads, fuse=False,
                                            channels_last=False).run(None, feeds)
    np.testing.assert_array_equal(got, literal)


def _depthwise_model(shape, stride=1):
    """QLinearConv C -> 128 -> depthwise 3 x 3 (at ``stride``) -> QLinearConv
    128 -> 64, the input of ``shape`` (its dimensions numbers or names; C its
    second)."""
    rng = np.random.default_rng(5)
    nodes, initializers = [], [numpy_helper.from_array(np.float32(0.05), "s"),
                               numpy_helper.from_array(np.uint8(100), "z")]
    expand = _qlinear_conv(nodes, initializers, "x", shape[1], 128, rng, "expand")
    weight = rng.integers(-60, 61, (128, 1, 3, 3), dtype=np.int8)
    initializers += [numpy_helper.from_array(weight, "dw_w"),
                     numpy_helper.from_array(np.float32(0.01), "dw_ws"),
                     numpy_helper.from_array(np.int8(0), "dw_wz")]
    nodes.append(helper.make_node(
        "QLinearConv", [expand, "s", "z", "dw_w", "dw_ws", "dw_wz", "s", "z"], ["dw"],
        name="depthwise", pads=[1, 1, 1, 1], strides=[stride, stride], group=128))
    _qlinear_conv(nodes, initializers, "dw", 128, 64, rng, "y")
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, shape)],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize("shape, depthwise_layouts", [
    ([1, 64, 8, 8], (True, True)),        # small and known: the kernel takes it
    (["n", 64, 8, 8], (False, False)),    # a size the model leaves open: not known
    ([1, 64, 40, 40], (False, False))])   # too many outputs for the channels-last kernel
def test_a_depthwise_convolution_goes_channels_last_where_its_image_is_known_and_small(
        shape, depthwise_layouts):
    model = _depthwise_model(shape)
    size = [1 if isinstance(dim, str) else dim for dim in shape]
    feeds = {"x": np.random.default_rng(6).integers(0, 256, size, dtype=np.uint8)}
    session = qops.onnx.InferenceSession(model, n_threads=2)
    layouts = {node: step.channels_last for step in session.steps for node in step.nodes}
    assert layouts["depthwise"] == depthwise_layouts
    assert layouts["expand"] == (False, depthwise_layouts[0])
    (got,) = session.run(None, feeds)
    (want,) = qops.onnx.InferenceSession(model, n_threads=2, channels_last=False).run(None,
                                                                                    feeds)
    np.testing.assert_array_equal(got, want)


def _skip_without_pair_kernel():
    """Pairs need the depthwise pair kernel (every x86-64 build has it)."""
    from qops.backends.native import variants

    if not variants.module().PAIR_KERNEL:
        pytest.skip("this build's kernels have no depthwise pair kernel")


@pytest.mark.parametrize("n_threads", [1, 2])
@pytest.mark.parametrize("stride", [1, 2])
def test_an_expansion_and_its_channels_first_depthwise_convolution_run_as_one_step(
        n_threads, stride):
    """A 1 x 1 expansion whose only reader is a depthwise convolution of a
    large image (both channels-first) is one step of the pair, whose blocks
    of expanded channels are filtered in cache: the bytes of the session that
    runs each node on its own, and of the literal graph.  An expansion that
    is also a graph output stays a step of its own."""
    _skip_without_pair_kernel()
    model = _depthwise_model([1, 64, 40, 40], stride=stride)
    feeds = {"x": np.random.default_rng(11).integers(0, 256, (1, 64, 40, 40), dtype=np.uint8)}
    session = qops.onnx.InferenceSession(model, n_threads=n_threads)
    [pair] = [step for step in session.steps if "depthwise" in step.nodes]
    assert pair.nodes == ("expand", "depthwise") and pair.channels_last == (False, False)
    assert pair.kind == "qops QLinearConv (compiled) + qops QLinearConv (compiled)"
    assert pair.inputs == ("x",) and pair.outputs == ("dw",)
    (literal,) = qops.onnx.InferenceSession(model, n_threads=n_threads, fuse=False,
                                            channels_last=False).run(None, feeds)
    for _ in range(2):
        (got,) = session.run(None, feeds)
        np.testing.assert_array_equal(got, literal)
    model.graph.output.append(helper.make_tensor_value_info("expand", TensorProto.UINT8, None))
    both = qops.onnx.InferenceSession(model, n_threads=n_threads)
    assert not any(len(step.nodes) == 2 for step in both.steps)
    got = both.run(None, feeds)
    np.testing.assert_array_equal(got[0], literal)


def test_an_expansion_of_few_channels_writes_channels_last_for_its_depthwise():
    """A bottleneck's expansion of 32 channels reads its image channels-first
    and writes its 128 channels channels-last (the implicit GEMM copies the
    image channels-last either way), for a depthwise convolution at stride
    2 whose 28 x 28 image the kernel copies in bands of rows (196 outputs,
    30 x 30 padded pixels): the same bytes as a session that keeps every
    tensor channels-first, and as the literal graph."""
    model = _depthwise_model([1, 32, 28, 28], stride=2)
    feeds = {"x": np.random.default_rng(8).integers(0, 256, (1, 32, 28, 28), dtype=np.uint8)}
    session = qops.onnx.InferenceSession(model, n_threads=2)
    layouts = {step.nodes[0]: step.channels_last for step in session.steps}
    assert layouts["expand"] == (False, True) and layouts["depthwise"] == (True, True)
    assert layouts["y"] == (True, False)
    for _ in range(2):  # the second run on the bound kernels
        (got,) = session.run(None, feeds)
        (want,) = qops.onnx.InferenceSession(model, n_threads=2, channels_last=False).run(
            None, feeds)
        np.testing.assert_array_equal(got, want)
    (literal,) = qops.onnx.InferenceSession(model, n_threads=2, fuse=False,
                                            channels_last=False).run(None, feeds)
    np.testing.assert_array_equal(got, literal)


def test_a_bound_session_runs_its_channels_last_steps_on_the_kernels(monkeypatch):
    """Once a run has bound them, the convolutions on channels-last tensors
    (int8 images, a batch of three) go to their kernels: none falls back to
    the operator's call on transposed images."""
    from qops.ops import compiled

    model = _depthwise_model([3, 64, 8, 8])
    feeds = {"x": np.random.default_rng(7).integers(0, 256, (3, 64, 8, 8), dtype=np.uint8)}
    session = qops.onnx.InferenceSession(model, n_threads=2)
    assert sum(any(step.channels_last) for step in session.steps) == 3
    (want,) = qops.onnx.InferenceSession(model, n_threads=2, channels_last=False).run(None,
                                                                                    feeds)
    (got,) = session.run(None, feeds)

    def refuse(*args, **kwargs):
        raise AssertionError("a channels-last step took the transposing path")

    monkeypatch.setattr(compiled.CompiledOperator, "__call__", refuse)
    (again,) = session.run(None, feeds)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(again, want)


def test_a_network_s_first_convolution_and_max_pooling_go_channels_last():
    """The first convolution reads the graph's 3 channels as they are and
    writes its 64 channels-last (it reads too few channels to take them
    channels-last, enough to write them); the max pooling after it keeps
    the layout, and the convolutions after that read it."""
    rng = np.random.default_rng(8)
    nodes, initializers = [], [numpy_helper.from_array(np.float32(0.05), "s"),
                               numpy_helper.from_array(np.uint8(100), "z")]
    stem = _qlinear_conv(nodes, initializers, "x", 3, 64, rng, "stem", kernel=3, stride=2)
    nodes.append(helper.make_node("MaxPool", [stem], ["pooled"], name="pool",
                                  kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
    _qlinear_conv(nodes, initializers, "pooled", 64, 64, rng, "y", kernel=3)
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, [2, 3, 20, 20])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    feeds = {"x": rng.integers(0, 256, (2, 3, 20, 20), dtype=np.uint8)}
    session = qops.onnx.InferenceSession(model, n_threads=2)
    layouts = {step.nodes[0]: step.channels_last for step in session.steps}
    assert layouts == {"stem": (False, True), "pool": (True, True), "y": (True, False)}
    (got,) = session.run(None, feeds)
    (want,) = qops.onnx.InferenceSession(model, n_threads=2, channels_last=False).run(None,
                                                                                    feeds)
    np.testing.assert_array_equal(got, want)


def test_a_convolution_that_reads_too_few_channels_never_takes_channels_last_images():
    steps = [_step("conv1", ["x", "w"], "a", "conv"), _step("conv2", ["a", "w"], "y", "conv")]
    narrow = steps[1].call.layouts
    steps[1].call.layouts = _layout.ConvolutionLayouts(narrow.make, reads=False)
    assert _layouts(steps) == {"conv1": (False, False), "conv2": (False, False)}


def _pooling(name, inputs, output):
    step = _step(name, inputs, output)
    step.call.layouts = _layout.FollowingLayouts(lambda: step.call)
    return step


@pytest.mark.parametrize("case, expected", [
    ("as in a network", {"stem": (False, True), "pool": (True, True), "conv": (True, False)}),
    ("its output a graph output", {"stem": (False, False), "pool": (False, False),
                                   "conv": (False, False)}),
    ("another reader without layouts", {"stem": (False, False), "pool": (False, False),
                                        "conv": (False, False)}),
    ("its input the graph's", {"pool": (False, False), "conv": (False, False)})])
def test_a_max_pooling_keeps_its_input_s_layout_where_everything_around_it_takes_it(
        case, expected):
    steps = [_step("stem", ["x", "w"], "a", "conv"), _pooling("pool", ["a"], "p"),
             _step("conv", ["p", "w"], "y", "conv")]
    outputs = ("y",)
    if case == "its output a graph output":
        outputs = ("y", "p")
    elif case == "another reader without layouts":
        steps.append(_step("shape", ["p"], "s"))
        outputs = ("y", "s")
    elif case == "its input the graph's":
        steps = steps[1:]
        steps[0] = _pooling("pool", ["x"], "p")
    layouts = _layouts(steps, outputs=outputs)
    layouts.pop("shape", None)
    assert layouts == expected


def test_mobilenet_v2_s_first_expansions_run_with_their_depthwise_convolutions():
    """A QDQ MobileNetV2 (the example's small form) runs its channels-first
    expansions with their depthwise convolutions as single steps: the
    bytes of a session that runs each group on its own (channels-first),
    and of one that fuses nothing (``fuse=False``, which makes no pairs)."""
    from qops.onnx import examples

    _skip_without_pair_kernel()
    model = examples.by_name("mobilenet_v2-qdq-per-channel").build(0, small=True)
    feeds = examples.random_inputs(model, 1)
    session = qops.onnx.InferenceSession(model, n_threads=2)
    pairs = [step for step in session.steps if step.kind == "QDQ Conv + QDQ Conv"]
    assert pairs and all(len(step.nodes) == len(set(step.nodes)) > 2 for step in pairs)
    literal = qops.onnx.InferenceSession(model, n_threads=2, fuse=False)
    assert not any(" + " in step.kind for step in literal.steps)
    (want,) = qops.onnx.InferenceSession(model, n_threads=2, channels_last=False).run(None, feeds)
    for _ in range(2):
        np.testing.assert_array_equal(session.run(None, feeds)[0], want)
    np.testing.assert_array_equal(literal.run(None, feeds)[0], want)
