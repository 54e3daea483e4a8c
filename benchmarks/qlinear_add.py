"""ELEMENT_WISE_QUANTIZED_LINEAR_ADD against onnxruntime's com.microsoft
QLinearAdd, 2 threads each, alternating rounds; prints each round's best
times and their ratio, and how many outputs differ (at most by 1).

    python benchmarks/qlinear_add.py [--rounds 3]
"""

import argparse
import time

import numpy as np

import qops

SHAPES = {"resnet_residual_56": ((1, 256, 56, 56), (1, 256, 56, 56)),
          "per_channel_broadcast": ((1, 256, 56, 56), (1, 256, 1, 1))}


def session(a, b, parameters):
    import onnxruntime
    from onnx import helper, numpy_helper

    names = ["A", "A_scale", "A_zero_point", "B", "B_scale", "B_zero_point", "C_scale",
             "C_zero_point"]
    node = helper.make_node("QLinearAdd", names, ["C"], domain="com.microsoft")
    graph = helper.make_graph(
        [node], "add",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
         for n, x in (("A", a), ("B", b))],
        [helper.make_tensor_value_info("C", helper.np_dtype_to_tensor_dtype(a.dtype), None)],
        initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in parameters.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 2
    return onnxruntime.InferenceSession(model.SerializeToString(), options,
                                        providers=["CPUExecutionProvider"])


def best(function, repeats=40):
    function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    for name, (a_shape, b_shape) in SHAPES.items():
        a = rng.integers(0, 256, a_shape).astype(np.uint8)
        b = rng.integers(0, 256, b_shape).astype(np.uint8)
        parameters = dict(A_scale=np.float32(0.05), A_zero_point=np.uint8(3),
                          B_scale=np.float32(0.07), B_zero_point=np.uint8(9),
                          C_scale=np.float32(0.09), C_zero_point=np.uint8(5))
        out = np.empty(np.broadcast_shapes(a_shape, b_shape), np.uint8)
        ort = session(a, b, parameters)

        def ours():
            return qops.element_wise_quantized_linear_add(
                a=a, a_scale=parameters["A_scale"], a_zero_point=parameters["A_zero_point"],
                b=b, b_scale=parameters["B_scale"], b_zero_point=parameters["B_zero_point"],
                output_scale=parameters["C_scale"], output_zero_point=parameters["C_zero_point"],
                out=out, n_threads=2)

        def theirs():
            return ort.run(None, {"A": a, "B": b})[0]

        difference = np.abs(ours().astype(int) - theirs().astype(int))
        for round_number in range(args.rounds):
            q, o = best(ours), best(theirs)
            print(f"{name} round {round_number + 1}: qops {q * 1e3:.3f} ms, onnxruntime "
                  f"{o * 1e3:.3f} ms, qops speed / onnxruntime {o / q:.2f}")
        print(f"{name}: {int((difference > 0).sum())} of {difference.size} outputs differ "
              f"from onnxruntime's, by at most {int(difference.max())}")


if __name__ == "__main__":
    main()
