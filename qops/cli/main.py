"""``python -m qops``: information, the registry's tables, call validation, the benchmark and
ONNX models (the subcommands live in this package: :mod:`qops.cli.bench`, :mod:`qops.cli.run`)."""

from __future__ import annotations

import argparse
import json
import sys

EPILOG = """\
examples:
  python -m qops info
  python -m qops ops
  python -m qops ops QUANTIZED_LINEAR_MATRIX_MULTIPLY --feature-level 2_1
  python -m qops validate QUANTIZED_LINEAR_MATRIX_MULTIPLY --feature-level 2_1 \\
      a=uint8:2,3 b=int8:3,4 a_scale=0.5 b_scale=0.25 output_scale=1
  python -m qops validate --json call.json
  python -m qops bench square_1024 tiny_4
  python -m qops run model.onnx --input x=x.npy --out outputs
"""


def _parse_number(text):
    try:
        return int(text)
    except ValueError:
        return float(text)


def _parse_assignment(text):
    """``slot=dtype:d0,d1,...`` (a tensor), ``slot=dtype:`` (a scalar tensor),
    ``name=number``, ``name=n0,n1`` (an attribute tuple) or ``name=word``."""
    from qops import TensorDesc

    if "=" not in text:
        raise ValueError(f"expected NAME=VALUE, not {text!r}")
    name, value = text.split("=", 1)
    if ":" in value:
        dtype, sizes = value.split(":", 1)
        dims = tuple(int(s) for s in sizes.split(",") if s.strip()) if sizes.strip() else ()
        return name, TensorDesc(dtype, dims)
    if "," in value:
        return name, tuple(int(v) for v in value.split(","))
    try:
        return name, _parse_number(value)
    except ValueError:
        if value.lower() in ("true", "false"):
            return name, value.lower() == "true"
        return name, value


def _from_json(path):
    """A call described in JSON::

        {"operator": "QuantizeLinear", "opset": 21,
         "slots": {"x": {"dtype": "float32", "shape": [2, 3]}, "y_scale": 0.5},
         "attributes": {"output_dtype": "int4"}}
    """
    from qops import TensorDesc

    with (sys.stdin if path == "-" else open(path)) as handle:
        spec = json.load(handle)
    if not isinstance(spec, dict):
        raise ValueError("the JSON must be an object with \"operator\" and \"slots\"")
    slots = {}
    for name, value in dict(spec.get("slots", {})).items():
        if isinstance(value, dict):
            missing = [key for key in ("dtype", "shape") if key not in value]
            if missing:
                raise ValueError(f"slot {name!r} needs " + " and ".join(f'"{k}"' for k in missing)
                                 + " (\"shape\": [] for a scalar)")
            value = TensorDesc(value["dtype"], tuple(value["shape"]))
        slots[name] = value
    for name, value in dict(spec.get("attributes", {})).items():
        slots[name] = tuple(value) if isinstance(value, list) else value
    feature_level = spec.get("feature_level")
    if isinstance(feature_level, list):  # JSON has no tuples: [2, 1] means (2, 1)
        feature_level = tuple(feature_level)
    return spec.get("operator"), feature_level, spec.get("opset"), slots


def _command_info(args):
    from qops import show_config

    show_config(peak=args.peak)
    return 0


def _command_ops(args):
    from qops import registry
    from qops.registry.render import describe, overview
    from qops.registry.schema import FeatureLevel, Opset

    if args.name is None:
        print(overview(style=args.style))
        return 0
    try:
        op = registry.get(args.name)
    except KeyError as error:
        print(f"error: {error.args[0]}", file=sys.stderr)
        return 2
    version = None
    try:
        if args.feature_level is not None:
            if op.source != "DirectML":
                raise ValueError(f"{op.name} is an {op.source} operator: use --opset")
            version = FeatureLevel.parse(args.feature_level)
        if args.opset is not None:
            if op.source == "DirectML":
                raise ValueError(f"{op.name} is a DirectML operator: use --feature-level")
            version = Opset(args.opset, registry.SOURCES[op.source])
            if not version.domain and registry.NEWEST_OPSET < version:
                raise ValueError(f"{version} is newer than the newest opset qops describes "
                                 f"({registry.NEWEST_OPSET.number})")
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(describe(op, version, style=args.style))
    return 0


def _command_validate(args):
    from qops import ValidationError, validate

    try:
        if args.json:
            name, feature_level, opset, slots = _from_json(args.json)
            name = args.name or name
            feature_level = args.feature_level or feature_level
            opset = args.opset or opset
        else:
            name, feature_level, opset = args.name, args.feature_level, args.opset
            slots = dict(_parse_assignment(text) for text in args.slots)
    except (OSError, ValueError, KeyError, TypeError) as error:
        print(f"error: cannot read the call: {error}", file=sys.stderr)
        return 2
    if not name:
        print("error: name an operator (or give \"operator\" in the JSON file)", file=sys.stderr)
        return 2
    try:
        result = validate(name, feature_level=feature_level, opset=opset, **slots)
    except ValidationError as error:
        print(error)
        return 1
    print(result)
    return 0


def _command_bench(args):
    if getattr(args, "n_bits", False):
        from qops.cli import bench_n_bits

        return bench_n_bits.main(args)
    if getattr(args, "models", False):
        from qops.cli import bench_models

        if getattr(args, "simd", None):
            from qops.cli.bench import choose_variant

            problem = choose_variant(args.simd)
            if problem:
                print(f"error: {problem}", file=sys.stderr)
                return 2
        return bench_models.main(args)
    from qops.cli import bench as _bench

    return _bench.main(args)


def _command_run(args):
    try:
        from qops.cli.run import run_model
    except ImportError as error:
        print(f"error: running models needs the onnx extra (pip install \"qops[onnx]\"): {error}",
              file=sys.stderr)
        return 2
    return run_model(args)


def build_parser():
    from qops.cli.bench import ROUNDS

    parser = argparse.ArgumentParser(
        prog="python -m qops", description="Quantized linear operators with exact semantics.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    info = commands.add_parser("info", help="versions, OpenMP, threads, SIMD level")
    info.add_argument("--peak", action="store_true",
                      help="also measure the SIMD level's multiply-add ceiling (about 0.3 s)")
    info.set_defaults(run=_command_info)

    ops = commands.add_parser("ops", help="the registry's operators and tensor-support tables")
    ops.add_argument("name", nargs="?", help="an operator (registry or function name)")
    level = ops.add_mutually_exclusive_group()
    level.add_argument("--feature-level", help="DirectML feature level, e.g. 2_1")
    level.add_argument("--opset", type=int, help="ONNX opset, e.g. 21")
    ops.add_argument("--style", choices=("text", "markdown", "rst"), default="text")
    ops.set_defaults(run=_command_ops)

    check = commands.add_parser(
        "validate", help="check an operator call described on the command line or in JSON",
        description="Exit status 0 when the call is valid, 1 with the error message when not.")
    check.add_argument("name", nargs="?", help="an operator (registry or function name)")
    check.add_argument("slots", nargs="*", metavar="NAME=VALUE",
                       help="slot=dtype:d0,d1 (tensor), slot=number (scalar), attr=v or attr=v0,v1")
    check.add_argument("--feature-level", help="DirectML feature level (default: newest)")
    check.add_argument("--opset", type=int, help="ONNX opset (default: the newest qops knows)")
    check.add_argument("--json", metavar="FILE", help="read the call from a JSON file ('-': stdin)")
    check.set_defaults(run=_command_validate)

    bench = commands.add_parser(
        "bench", help="time qops against onnxruntime (needs the bench extra)",
        description="Time the convolution, matrix-multiply, quantize and dequantize cases "
                    "against onnxruntime in the same run, judge every output against the exact "
                    "result, and measure the kernel variant's peak for the '% peak' column; "
                    "write a Markdown table and a PNG chart.  Exit status 1 when a qops output "
                    "is not exact.")
    bench.add_argument("cases", nargs="*", help="case names (default: all)")
    bench.add_argument("--threads", type=int, default=2)
    bench.add_argument("--budget", type=float, default=0.25,
                       help="seconds of timing per implementation and case")
    bench.add_argument("--rounds", type=int, default=ROUNDS,
                       help="rounds per case, each timing qops and then each onnxruntime session "
                            "in turn with a share of the budget; each time is the best of the "
                            "rounds (default: %(default)s)")
    bench.add_argument("--simd", metavar="VARIANT",
                       help="run the kernels of this variant (one the CPU runs, e.g. avx2 on a "
                            "VNNI machine) instead of the best")
    bench.add_argument("--out", default="benchmarks/results", help="directory for bench.md/png")
    bench.add_argument("--models", action="store_true",
                       help="time whole example models (qops.onnx.examples) in a "
                            "qops.onnx.InferenceSession against onnxruntime instead; CASES then "
                            "name models or architectures (resnet50, mobilenet_v2, bert_layer)")
    bench.add_argument("--n-bits", action="store_true", dest="n_bits",
                       help="time MatMulNBits (4-bit weights in blocks) against onnxruntime's; "
                            "cases are picked by whole words of their names (4096x11008, "
                            "b32, zp, m1, level4): words of one place are alternatives, "
                            "of different places all hold")
    bench.add_argument("--small", action="store_true",
                       help="with --models: the small versions of the models")
    bench.set_defaults(run=_command_bench)

    run = commands.add_parser(
        "run", help="run an ONNX model in a qops.onnx.InferenceSession (needs the onnx extra)",
        description="Run MODEL in a qops.onnx.InferenceSession (QDQ groups and onnxruntime's "
                    "quantized nodes on qops' integer operators, the rest on onnx.reference); "
                    "write each output to OUT/NAME.npy and print the session's calls and time.")
    run.add_argument("model", help="an .onnx file")
    run.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                     help="a graph input (repeat for each)")
    run.add_argument("--out", default=".", help="directory for the outputs (default: .)")
    run.add_argument("--repeat", type=int, default=1,
                     help="time this many runs after a warm-up run (default: 1, no warm-up)")
    run.add_argument("--threads", type=int, default=None, dest="n_threads",
                     help="threads of every operator (default: qops' setting)")
    run.add_argument("--no-fuse", action="store_true",
                     help="run every node as written (no QDQ groups fused), for comparison")
    run.set_defaults(run=_command_run)
    return parser


def main(argv=None):
    parser = build_parser()
    # Slots may follow options (``NAME --feature-level 2_1 a=...``), which
    # argparse's positional grouping would reject: collect them here.
    args, extra = parser.parse_known_args(argv)
    if extra:
        if args.command != "validate" or any(e.startswith("-") or "=" not in e for e in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.slots = list(args.slots) + extra
    if args.command is None:
        parser.print_help()
        return 0
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
