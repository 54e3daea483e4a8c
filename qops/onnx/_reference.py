"""qops' operators as classes of ``onnx.reference``'s evaluator."""

from __future__ import annotations

import time

from qops.onnx._nodes import ADAPTERS, CONTRIB_ADAPTERS, CONTRIB_DOMAIN


def operator_classes(run_node, timings=None):
    """One ``OpRun`` subclass per operator ``run_node`` (:func:`qops.onnx.run_node`) runs.

    ``timings``, a dict, collects ``op_type -> [calls, seconds]`` as nodes run.
    """
    from onnx.reference.op_run import OpRun

    def run(self, *inputs, **attributes):  # noqa: ARG001 - the node's own attributes are read
        opset = self.run_params.get("opsets", {}).get("", None)
        if timings is None:
            return tuple(run_node(self.onnx_node, list(inputs), opset=opset))
        start = time.perf_counter()
        outputs = tuple(run_node(self.onnx_node, list(inputs), opset=opset))
        entry = timings.setdefault(self.onnx_node.op_type, [0, 0.0])
        entry[0] += 1
        entry[1] += time.perf_counter() - start
        return outputs

    return ([type(name, (OpRun,), {"op_domain": "", "_run": run,
                                   "__doc__": f"ONNX {name} run by qops.onnx.run_node."})
             for name in ADAPTERS]
            + [type(name, (OpRun,), {"op_domain": CONTRIB_DOMAIN, "_run": run,
                                     "__doc__": f"{CONTRIB_DOMAIN} {name} run by "
                                                "qops.onnx.run_node."})
               for name in CONTRIB_ADAPTERS])
