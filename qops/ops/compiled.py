"""Compiled operators: constant slots and attributes validated once, bound to a callable.

DirectML's model of an operator initialized with what it owns
(``DML_TENSOR_FLAG_OWNED_BY_DML``), widened to any constant: :func:`compile`
binds any input slot of an operator except its data operand (a weight with
its quantization parameters, an activation's scale and zero point, an
output's, a residual add's constant operand) plus the attributes, and
returns a callable taking the other slots.  A bound weight (a convolution's
filter, a matrix multiply's B) is packed into the kernels' layout on first
use and shared by every later call.

Each compilable operator is one :class:`Compilable` entry of
:data:`COMPILABLE`, naming its front end's validation and value checks
(the plans the plain function keeps, :class:`~qops.ops.plans.PlanCache`),
its data operands, its weight and the stand-ins that let the constants be
validated before any call.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import threading
from operator import is_, itemgetter
from typing import Callable, Optional

import numpy as np

from qops import registry
from qops.backends import dispatch
from qops.errors import ValidationError
from qops.ops import (
    convolution,
    dml_quantize,
    element_wise_quantize,
    elementwise,
    integer,
    integer_to_float,
    matmul,
    matmul_n_bits,
    pooling,
    quantize,
)
from qops.ops.arguments import is_python_number
from qops.ops.plans import Binder, FastPath, PlanCache, recent_call, signature_tail
from qops.ops.validation import TensorDesc, fail, resolve_version
from qops.reference import integer_to_float_multipliers as reference_multipliers
from qops.registry import Opset
from qops.registry import dtypes as _dtypes
from qops.threads import resolve_threads

#: The runtime slots of a compiled MATRIX_MULTIPLY_INTEGER_TO_FLOAT whose kernel
#: run binds with A's scale and zero point per call (_bind_parameters).
_PER_CALL_PARAMETERS = frozenset({"a", "a_scale", "a_zero_point"})
_HALF_FLOAT32_MAX = float(np.finfo(np.float32).max) / 2

__all__ = ["compile", "CompiledOperator", "Compilable", "COMPILABLE"]

#: A keyword a call did not give (``None`` is a value: an optional slot left absent).
_UNSET = object()


@dataclasses.dataclass(frozen=True)
class Compilable:
    """What :func:`compile` knows of one operator's front end.

    Attributes
    ----------
    prepare, check_values, value_slots
        The front end's validation, the value checks of a call like one
        validated before, and the slots whose values those checks read: a
        compiled operator keeps plans of its own with them, as the plain
        function does, so that its results are the function's.
    attributes : tuple of (name, default)
        The attributes the plain function passes to its plans, at the
        function's defaults; ``compile`` takes these and no others.
    data : tuple of str
        The data operands: never bound.
    weight : str, optional
        The operand the kernels pack once for a compiled operator when it is
        bound (``Call.packed``).  With it are bound ``weight_group``: a
        weight's quantization parameters (and bias), which are bound as
        absent when not given and are not bound without it.
    stand_ins : callable
        ``stand_ins(op, version, bound, attributes)``: descriptions of the
        slots a call gives that fit the bound ones, so that validating them
        together leaves only errors about the constants and attributes.
        A scale the call gives stands in as a description (no value) or as
        1.0, whichever keeps the checks that combine it with a bound scale
        (their product or quotient) for the call.
    binds : bool
        Whether the implementations bind a kernel run to one form of call
        (:class:`~qops.ops.plans.Binder`): the GEMM-based operators.
    learns_fast : bool
        Whether the operator's fast path learns the forms the compiled
        operator's plans validate (small matrix multiplies), at any attributes.
    fast_attributes : tuple of (name, value), optional
        The attributes at which the plain function takes the operator's
        fast path of fixed form (at the newest version): a compiled
        operator with these takes it too.  ``None``: no such path.
    """

    prepare: Callable
    check_values: Optional[Callable]
    value_slots: tuple
    attributes: tuple
    data: tuple
    stand_ins: Callable
    weight: Optional[str] = None
    weight_group: tuple = ()
    binds: bool = False
    learns_fast: bool = False
    fast_attributes: Optional[tuple] = None

    def default_attributes(self):
        """The attributes as the plain function passes them when none is given."""
        return dict(self.attributes)


# -- stand-ins -------------------------------------------------------------------------------

#: A scale the call gives: float32, one value, nothing to compare the bound scales with.
_SCALE = TensorDesc("float32", ())
#: The integer types a Python-number zero point's data may have, smallest first.
_INTEGER_TYPES = ("UINT8", "INT8", "UINT16", "INT16", "INT32", "UINT32")


def _shape(value):
    """A bound value's shape (a number's is ``()``)."""
    try:
        return tuple(np.shape(value))
    except Exception:  # an object NumPy cannot read: its validation says so
        return ()


def _data_type(op, version, slot, paired=None, default="UINT8"):
    """The stand-in type of data slot ``slot``: that of the bound parameter
    ``paired`` (its zero point, or its scale) where the slot may have it, so
    that the pair agrees; else ``default``, else the first type it allows."""
    allowed = op.support(version).tensor(slot).dtypes
    dtype = getattr(paired, "dtype", None)
    if dtype is not None:
        try:
            name = _dtypes.name_of(np.dtype(dtype))
        except TypeError:
            name = None
        if name in allowed:
            return _dtypes.to_numpy(name)
    elif (is_python_number(paired) and isinstance(paired, numbers.Integral)
          and not isinstance(paired, bool)):
        # A number takes the data's type: one that holds it.
        for name in _INTEGER_TYPES:
            low, high = _dtypes.INTEGER_RANGES[name]
            if name in allowed and low <= paired <= high:
                return _dtypes.to_numpy(name)
    return _dtypes.to_numpy(default if default in allowed else allowed[0])


def _allowed_rank(op, version, slot, rank):
    """``rank`` moved into the dimension counts ``slot`` may have."""
    row = op.support(version).tensor(slot)
    high = row.max_dims if row.max_dims is not None else rank
    return min(max(rank, row.min_dims), high)


def _ints(value, count, fill):
    """An attribute's values as ints (``count`` of ``fill`` when absent or
    unreadable: the validation then names it)."""
    try:
        values = tuple(int(v) for v in value)
    except (TypeError, ValueError):
        return (fill,) * count
    return values if len(values) == count else (fill,) * count


def _spatial_count(attributes, names, default):
    """The spatial dimension count the attributes give (their one length)."""
    lengths = set()
    for name in names:
        value = attributes.get(name)
        if value is not None and hasattr(value, "__len__"):
            lengths.add(len(value))
    return lengths.pop() if len(lengths) == 1 else default


def _convolution_stand_ins(op, version, bound, attributes, scaled=True):
    """An input (and, when the call gives it, a filter) whose geometry fits
    the bound filter and the attributes: one image whose size is the
    dilated filter's."""
    weights = bound.get("filter")
    weight_shape = _shape(weights) if weights is not None else None
    if weight_shape is not None:
        spatial = 1 if len(weight_shape) == 3 else 2
    else:
        spatial = _spatial_count(attributes, ("strides", "dilations", "start_padding",
                                              "end_padding"), 2)
    try:
        groups = max(1, int(attributes.get("group_count") or 1))
    except (TypeError, ValueError):
        groups = 1
    kernel = (weight_shape[2:] if weight_shape is not None and len(weight_shape) == spatial + 2
              else (1,) * spatial)
    dilations = _ints(attributes.get("dilations") or (1,) * spatial, spatial, 1)
    sizes = tuple(max(1, d * (k - 1) + 1) for d, k in zip(dilations, kernel))
    channels = (weight_shape[1] * groups if weight_shape is not None and len(weight_shape) >= 2
                else groups)
    stand_ins = {"input": TensorDesc(_data_type(op, version, "input",
                                                bound.get("input_zero_point")),
                                     (1, channels) + sizes)}
    if weights is None:
        stand_ins["filter"] = TensorDesc("int8", (groups, 1) + (1,) * spatial)
    if scaled:
        stand_ins.update(input_scale=_SCALE, filter_scale=_SCALE, output_scale=_SCALE)
    return stand_ins


def _integer_convolution_stand_ins(op, version, bound, attributes):
    return _convolution_stand_ins(op, version, bound, attributes, scaled=False)


def _matmul_stand_ins(op, version, bound, attributes, scale=_SCALE,
                      row_parameters=("a_scale", "a_zero_point", "output_scale",
                                      "output_zero_point"), one_type=False):
    """An A (and, when the call gives it, a B) of one row per row of the
    bound per-row parameters and B's depth, at B's dimension count.
    ``one_type``: A and B have one type."""
    b = bound.get("b")
    row_shapes = [_shape(bound[name]) for name in row_parameters
                  if bound.get(name) is not None and len(_shape(bound[name])) >= 2]
    if b is not None:
        rank = len(_shape(b))
    elif row_shapes:
        rank = len(row_shapes[0])
    else:
        rank = 2
    rank = max(2, _allowed_rank(op, version, "a", rank))
    rows = max((shape[-2] for shape in row_shapes), default=1)
    b_shape = _shape(b) if b is not None else ()
    depth = b_shape[-2] if len(b_shape) >= 2 else 1
    batch = (1,) * (rank - 2)
    a_type = _data_type(op, version, "a", b if one_type and b is not None
                        else bound.get("a_zero_point"))
    stand_ins = {"a": TensorDesc(a_type, batch + (rows, depth))}
    if b is None:
        stand_ins["b"] = TensorDesc(a_type if one_type else np.dtype(np.int8),
                                    batch + (depth, 1))
    if scale is not None:
        stand_ins.update(a_scale=scale, b_scale=scale, output_scale=scale)
    return stand_ins


def _integer_matmul_stand_ins(op, version, bound, attributes):
    return _matmul_stand_ins(op, version, bound, attributes, scale=None,
                             row_parameters=("a_zero_point",))


def _integer_to_float_stand_ins(op, version, bound, attributes):
    # A number takes the scales' one type (float16 with a float16 scale or
    # bias bound), and 1 times a bound scale is finite when it is.
    stand_ins = _matmul_stand_ins(op, version, bound, attributes, scale=1.0,
                                  row_parameters=("a_scale", "a_zero_point"), one_type=True)
    del stand_ins["output_scale"]
    return stand_ins


def _n_bits_stand_ins(op, version, bound, attributes):
    """One row of A (and, when the call gives them, B and its scales) in the
    shapes the attributes give, in the type of the bound scales or bias."""
    k, n, bits, block_size = (_ints((attributes.get(name),), 1, 1)[0]
                              for name in ("k", "n", "bits", "block_size"))
    k, n, bits, block_size = max(k, 1), max(n, 1), max(bits, 1), max(block_size, 1)
    paired = bound.get("scales") if bound.get("scales") is not None else bound.get("bias")
    float_type = _data_type(op, version, "a", paired, default="FLOAT32")
    k_blocks = -(-k // block_size)
    stand_ins = {"a": TensorDesc(float_type, (1, k))}
    if "b" not in bound:
        stand_ins["b"] = TensorDesc(np.uint8, (n, k_blocks, max(1, block_size * bits // 8)))
    if "scales" not in bound:
        stand_ins["scales"] = TensorDesc(float_type, (n, k_blocks))
    return stand_ins


def _add_stand_ins(op, version, bound, attributes):
    """A (and B when the call gives it) of ones at B's or the parameters'
    dimension count: it broadcasts against any B."""
    b = bound.get("b")
    ranks = [len(_shape(value)) for name, value in bound.items()
             if value is not None and name != "b" and len(_shape(value)) > 0]
    rank = len(_shape(b)) if b is not None else (ranks[0] if ranks else 1)
    ones = (1,) * _allowed_rank(op, version, "a", rank)
    stand_ins = {"a": TensorDesc(_data_type(op, version, "a", bound.get("a_zero_point")), ones),
                 "a_scale": _SCALE, "b_scale": _SCALE, "output_scale": _SCALE}
    if b is None:
        stand_ins["b"] = TensorDesc(_data_type(op, version, "b", bound.get("b_zero_point")), ones)
    return stand_ins


def _pooling_stand_ins(op, version, bound, attributes):
    """An input as large as one dilated window, with as many channels as the
    bound per-channel parameters have."""
    spatial = _spatial_count(attributes, ("window_size",), 2)
    spatial = spatial if spatial in (2, 3) else 2
    window = _ints(attributes.get("window_size"), spatial, 1)
    dilations = _ints(attributes.get("dilations") or (1,) * spatial, spatial, 1)
    sizes = tuple(max(1, d * (w - 1) + 1) for d, w in zip(dilations, window))
    channels = 1
    for value in bound.values():
        shape = _shape(value)
        if math.prod(shape) > 1:
            channels = shape[0] if len(shape) == 1 else shape[1]
            break
    data = TensorDesc(_data_type(op, version, "input", bound.get("input_zero_point")),
                      (1, channels) + sizes)
    # Numbers, not descriptions: the checks read the scales only when both
    # have values, and their quotient is taken in float64, where float32
    # scales never overflow.
    return {"input": data, "input_scale": 1.0, "output_scale": 1.0}


def _common_shape(shapes):
    """The smallest shape every one of ``shapes`` divides or broadcasts to
    (their ranks' first when they differ: the validation then names one)."""
    shapes = [shape for shape in shapes if shape]
    if not shapes:
        return (1,)
    if any(len(shape) != len(shapes[0]) for shape in shapes):
        return shapes[0]
    return tuple(math.lcm(*(max(1, size) for size in sizes)) for sizes in zip(*shapes))


def _blocks_stand_ins(op, version, bound, attributes, quantizing):
    """DirectML's QUANTIZE / DEQUANTIZE and the element-wise forms: an input
    each parameter's sizes divide (or broadcast to), of the scale's type
    when quantizing, else of the zero point's."""
    scale, zero_point = bound.get("scale"), bound.get("zero_point")
    shape = _common_shape([_shape(v) for v in (scale, zero_point) if v is not None])
    if quantizing:
        data_type = _data_type(op, version, "input", scale, "FLOAT32")
    else:
        data_type = _data_type(op, version, "input", zero_point)
    scale_type = data_type if quantizing and data_type != np.int32 else np.dtype(np.float32)
    # A scale the call gives has the bound zero point's shape (they must agree).
    scale_shape = _shape(zero_point) if zero_point is not None else ()
    return {"input": TensorDesc(data_type, shape), "scale": TensorDesc(scale_type, scale_shape)}


def _quantize_blocks_stand_ins(op, version, bound, attributes):
    return _blocks_stand_ins(op, version, bound, attributes, True)


def _dequantize_blocks_stand_ins(op, version, bound, attributes):
    return _blocks_stand_ins(op, version, bound, attributes, False)


def _linear_stand_ins(op, version, bound, attributes, x_of, scale_name, zero_point_name):
    """QuantizeLinear / DequantizeLinear: an x the bound scale (or zero
    point) fits per tensor, per axis or blocked, by ``axis`` and
    ``block_size``."""
    parameter = bound.get(scale_name)
    if parameter is None:
        parameter = bound.get(zero_point_name)
    axis = attributes.get("axis")
    axis = int(axis) if isinstance(axis, (int, np.integer)) else 1
    block_size = attributes.get("block_size")
    block_size = int(block_size) if isinstance(block_size, (int, np.integer)) else 0
    if parameter is not None:
        shape = _shape(parameter)
    elif block_size:  # blocks of a scale the call gives: one block along the axis
        shape = (1,) * max(2, axis + 1 if axis >= 0 else -axis)
    else:
        shape = ()
    if len(shape) >= 2 or (block_size and shape):
        x_shape = list(shape)
        if -len(shape) <= axis < len(shape):
            x_shape[axis] = x_shape[axis] * max(1, block_size)
    elif len(shape) == 1 and shape[0] != 1:
        rank = max(2, axis + 1 if axis >= 0 else -axis)
        x_shape = [1] * rank
        x_shape[axis] = shape[0]
    else:
        x_shape = [1, 1]
    stand_ins = {"x": TensorDesc(x_of(op, version, bound), tuple(x_shape))}
    if bound.get(scale_name) is None:
        stand_ins[scale_name] = TensorDesc("float32", shape)
    return stand_ins


def _quantize_linear_stand_ins(op, version, bound, attributes):
    return _linear_stand_ins(
        op, version, bound, attributes,
        lambda op, version, bound: _data_type(op, version, "x", bound.get("y_scale"), "FLOAT32"),
        "y_scale", "y_zero_point")


def _dequantize_linear_stand_ins(op, version, bound, attributes):
    return _linear_stand_ins(
        op, version, bound, attributes,
        lambda op, version, bound: _data_type(op, version, "x", bound.get("x_zero_point")),
        "x_scale", "x_zero_point")


# -- the table -------------------------------------------------------------------------------

_SPATIAL = (("strides", None), ("dilations", None), ("start_padding", None),
            ("end_padding", None), ("group_count", None))

#: Every compilable operator, by registry name.
COMPILABLE = {
    "QUANTIZED_LINEAR_CONVOLUTION": Compilable(
        prepare=convolution.prepare, check_values=convolution.check_values,
        value_slots=convolution.VALUE_SLOTS, attributes=_SPATIAL + (("output_dtype", None),),
        data=("input",), stand_ins=_convolution_stand_ins, weight="filter",
        weight_group=("filter", "filter_scale", "filter_zero_point", "bias"), binds=True),
    "QUANTIZED_LINEAR_MATRIX_MULTIPLY": Compilable(
        prepare=matmul.prepare, check_values=matmul.check_values, value_slots=matmul.VALUE_SLOTS,
        attributes=(("output_dtype", None),), data=("a",), stand_ins=_matmul_stand_ins,
        weight="b", weight_group=("b", "b_scale", "b_zero_point"), binds=True,
        learns_fast=True),
    "CONVOLUTION_INTEGER": Compilable(
        prepare=integer.prepare_convolution_integer, check_values=None,
        value_slots=("input_zero_point", "filter_zero_point"), attributes=_SPATIAL,
        data=("input",), stand_ins=_integer_convolution_stand_ins, weight="filter",
        weight_group=("filter", "filter_zero_point"), binds=True),
    "MATRIX_MULTIPLY_INTEGER": Compilable(
        prepare=integer.prepare_matrix_multiply_integer, check_values=None,
        value_slots=("a_zero_point", "b_zero_point"), attributes=(), data=("a",),
        stand_ins=_integer_matmul_stand_ins, weight="b", weight_group=("b", "b_zero_point"),
        binds=True),
    "MATRIX_MULTIPLY_INTEGER_TO_FLOAT": Compilable(
        prepare=integer_to_float.prepare, check_values=integer_to_float.check_values,
        value_slots=integer_to_float.VALUE_SLOTS, attributes=(("output_dtype", None),),
        data=("a",), stand_ins=_integer_to_float_stand_ins, weight="b",
        weight_group=("b", "b_scale", "b_zero_point", "bias"), binds=True),
    "ELEMENT_WISE_QUANTIZED_LINEAR_ADD": Compilable(
        prepare=elementwise.prepare_add, check_values=elementwise.check_add_values,
        value_slots=elementwise.PARAMETERS, attributes=(("output_dtype", None),), data=("a",),
        stand_ins=_add_stand_ins, fast_attributes=(("output_dtype", None),)),
    "QUANTIZED_LINEAR_AVERAGE_POOLING": Compilable(
        prepare=pooling.prepare, check_values=pooling.check_values,
        value_slots=pooling.PARAMETERS,
        attributes=(("window_size", None), ("strides", None), ("start_padding", None),
                    ("end_padding", None), ("dilations", None), ("include_padding", False),
                    ("output_dtype", None)),
        data=("input",), stand_ins=_pooling_stand_ins),
    "ELEMENT_WISE_QUANTIZE_LINEAR": Compilable(
        prepare=element_wise_quantize.prepare_quantize,
        check_values=element_wise_quantize.check_values, value_slots=("scale", "zero_point"),
        attributes=(("output_dtype", None),), data=("input",),
        stand_ins=_quantize_blocks_stand_ins),
    "ELEMENT_WISE_DEQUANTIZE_LINEAR": Compilable(
        prepare=element_wise_quantize.prepare_dequantize,
        check_values=element_wise_quantize.check_values, value_slots=("scale", "zero_point"),
        attributes=(), data=("input",), stand_ins=_dequantize_blocks_stand_ins),
    "QUANTIZE": Compilable(
        prepare=dml_quantize.prepare_quantize, check_values=dml_quantize.check_values,
        value_slots=("scale", "zero_point"), attributes=(("output_dtype", None),),
        data=("input",), stand_ins=_quantize_blocks_stand_ins),
    "DEQUANTIZE": Compilable(
        prepare=dml_quantize.prepare_dequantize, check_values=dml_quantize.check_values,
        value_slots=("scale", "zero_point"), attributes=(("output_dtype", None),),
        data=("input",), stand_ins=_dequantize_blocks_stand_ins),
    "QuantizeLinear": Compilable(
        prepare=quantize.prepare_quantize, check_values=quantize.recheck_values,
        value_slots=("y_scale", "y_zero_point"),
        attributes=(("axis", 1), ("block_size", 0), ("saturate", True), ("output_dtype", None),
                    ("precision", None)),
        data=("x",), stand_ins=_quantize_linear_stand_ins,
        fast_attributes=(("axis", 1), ("block_size", 0), ("output_dtype", None),
                         ("precision", None))),
    "MatMulNBits": Compilable(
        prepare=matmul_n_bits.prepare, check_values=matmul_n_bits.check_values,
        value_slots=matmul_n_bits.VALUE_SLOTS,
        attributes=(("k", None), ("n", None), ("bits", 4), ("block_size", None),
                    ("accuracy_level", 0), ("weight_prepacked", 0)),
        data=("a",), stand_ins=_n_bits_stand_ins, weight="b",
        weight_group=("b", "scales", "zero_points", "g_idx", "bias")),
    "DequantizeLinear": Compilable(
        prepare=quantize.prepare_dequantize, check_values=quantize.recheck_values,
        value_slots=("x_scale", "x_zero_point"),
        attributes=(("axis", 1), ("block_size", 0), ("output_dtype", None)), data=("x",),
        stand_ins=_dequantize_linear_stand_ins),
}


# -- compiled operators ----------------------------------------------------------------------

class PackCache:
    """Constant operands in kernel layouts, packed on first use and then only
    read, so that concurrent calls share them without waiting on each other."""

    def __init__(self):
        self._entries = {}
        self._lock = threading.Lock()

    def get(self, key, pack):
        entry = self._entries.get(key)
        if entry is None:
            with self._lock:
                entry = self._entries.get(key)
                if entry is None:
                    entry = self._entries[key] = pack()
        return entry

    def keys(self):
        return self._entries.keys()


#: Not bound yet (a form whose bind is None has no kernel run).
_UNBOUND = object()


class CompiledOperator:
    """A callable bound to constant slots and attributes; see :func:`compile`.

    Calls from several threads at once are safe and run in parallel: the
    packed operands are written once, under a lock, and only read afterwards.

    Attributes
    ----------
    operator : qops.registry.schema.Operator
    feature_level : FeatureLevel or Opset
        The version the calls are validated against (an ONNX operator's opset).
    runtime_slots : tuple of str
        The slots a call gives, in slot order (the order positional slots take).
    """

    def __init__(self, operator, version, constants, attributes):
        spec = COMPILABLE[operator.name]
        self.operator = operator
        self.feature_level = version
        self._spec = spec
        self._constants = constants
        self._attributes = attributes
        # The attributes as the plain function hands them to its plans.
        self._call_attributes = dict(spec.default_attributes(), **attributes)
        self._packed = PackCache()
        # The kernels read call.packed as "the weight is bound": with the
        # weight given per call they must pack it per call.
        self._kernel_pack = self._packed if spec.weight in constants else None
        self._plans = PlanCache(spec.prepare, spec.check_values, spec.value_slots, recent=True)
        self.runtime_slots = tuple(s.name for s in operator.inputs if s.name not in constants)
        self._runtime_names = frozenset(self.runtime_slots)
        # The operands whose data each call brings (what the plans' recent
        # call and the Binder take anew), and the other slots a call gives.
        self._data_names = tuple(name for name in self.runtime_slots
                                 if name not in spec.value_slots)
        self._parameter_names = tuple(name for name in self.runtime_slots
                                      if name not in self._data_names)
        # The operator's fast path: small matrix multiplies learn their
        # validated forms, per compiled operator.
        self._fast = FastPath(operator.name)
        self._fixed_fast = self._fixed_fast_path()
        # Its arguments, the operator's slots in order: the bound values, and
        # where the call's go.
        self._fast_template = tuple(constants.get(s.name) for s in operator.inputs)
        self._fast_runtime = tuple((index, s.name) for index, s in enumerate(operator.inputs)
                                   if s.name not in constants)
        # The attributes and level never change: their part of every call's
        # plan key is made once.
        self._tail = signature_tail(self._call_attributes, version)
        # The recent form's kernel run bound to its plan: a network's calls
        # (see Binder); the plans' steps were about 4 of their 7
        # microseconds of Python, and the 7 a tenth of an attention product
        # (12 x 128 x 64 x 128) with AVX-512 VNNI.
        self._binder = Binder()
        # A float product whose calls bring A with its scale and zero point
        # (a dynamically quantized layer's): its kernel run bound with those
        # two per call (_bind_parameters), since a new scale each call
        # misses the plans' value cache.
        self._binds_parameters = (operator.name == "MATRIX_MULTIPLY_INTEGER_TO_FLOAT"
                                  and set(self.runtime_slots) == _PER_CALL_PARAMETERS)
        self._parameters_run = None
        # Kernel runs on channels-last images (_bound_channels_last), by form.
        self._channels_last_binds = {}
        self._followed_binds = {}

    def _fixed_fast_path(self):
        """The operator's fast path of fixed form when the plain function
        would take it with these attributes and this version, else ``None``."""
        wanted = self._spec.fast_attributes
        if wanted is None or self.feature_level != resolve_version(self.operator):
            return None
        attributes = self._call_attributes
        if not all(_same_attribute(attributes[name], value) for name, value in wanted):
            return None
        return FastPath(self.operator.name)

    @property
    def version(self):
        """The feature level or opset calls are validated against."""
        return self.feature_level

    @property
    def constants(self):
        """The bound slots, by name (``None``: bound as absent)."""
        return dict(self._constants)

    @property
    def attributes(self):
        """The attributes given to :func:`compile`, by name."""
        return dict(self._attributes)

    def _too_many_positional(self):
        fail(self.operator, f"takes at most {len(self.runtime_slots)} positional slots "
                            f"({', '.join(self.runtime_slots)})")

    def _refuse(self, slots):
        """Raise for the call's first slot that is bound or unknown."""
        bound = set(slots) & set(self._constants)
        name = sorted(bound or set(slots) - self._runtime_names)[0]
        why = "is bound at compile time" if bound else "is not a slot of this operator"
        fail(self.operator, f"{name} {why}; the call takes {', '.join(self.runtime_slots)}",
             slot=name)

    def _positional(self, args, slots):
        """The call's slots with its positional ones named, in slot order."""
        if len(args) > len(self.runtime_slots):
            self._too_many_positional()
        for name, value in zip(self.runtime_slots, args):
            if name in slots:
                fail(self.operator, f"{name} given twice", slot=name)
            slots[name] = value
        return slots

    def __reduce__(self):
        # Its caches and locks stay behind: a copy (another process, a dask
        # worker) compiles the same constants again and packs them on its
        # first call.
        return (_recompile, (self.operator.name, self.feature_level, self._constants,
                             self._attributes))

    def __repr__(self):
        bound = ", ".join(f"{k}={getattr(v, 'shape', v)}" for k, v in self._constants.items())
        return f"<compiled {self.operator.name} at {self.feature_level}: {bound}>"

    def __call__(self, *args, out=None, n_threads=None, **slots):
        if args:
            slots = self._positional(args, slots)
        if not self._runtime_names.issuperset(slots):
            self._refuse(slots)
        if self._fixed_fast is not None:
            path = self._fixed_fast.get()
            if path is not None:
                values = list(self._fast_template)
                for index, name in self._fast_runtime:
                    values[index] = slots.get(name)
                result = path.run(*values, out,
                                  resolve_threads() if n_threads is None else n_threads)
                if result is not None:
                    return result
        # In slot order, whatever order the keywords came in: the plans key
        # calls by their slots' values in order.
        slots = {name: slots.get(name) for name in self.runtime_slots}
        if out is None and self._binder.bound is not None:
            result = self._run_bound(slots, n_threads)
            if result is not None:
                return result
        if out is None and self._parameters_run is not None:
            result = self._run_parameters(slots, n_threads)
            if result is not None:
                return result
        return self._planned(slots, out, n_threads, self._fast.get())

    def _run_parameters(self, slots, n_threads):
        """A call of the bound form (_bind_parameters) with its own scale and
        zero point of A, or None for any other (the plans then take it, and
        refuse what they refuse): A of the form's dtype and shape, its scale
        a float32 scalar (NumPy's, or a 0-d array) and finite, its zero point
        absent or a scalar of A's type, and the multipliers finite."""
        dtype, shape, run, b_scale, largest_b_scale, generation = self._parameters_run
        a, scale, zero = slots["a"], slots["a_scale"], slots["a_zero_point"]
        if not (type(a) is np.ndarray and a.dtype == dtype and a.shape == shape):
            return None
        # (A 0-d array of the very dtype only: one of the other byte order
        # would read as float32 once taken out, and the plans refuse it.)
        if type(scale) is np.ndarray and scale.ndim == 0 and scale.dtype == np.float32:
            scale = scale[()]
        if type(zero) is np.ndarray and zero.ndim == 0 and zero.dtype == dtype:
            zero = zero[()]
        # A product below half of float32's largest is finite once rounded
        # (the plans check the rest, and refuse what overflows).
        if (type(scale) is not np.float32 or not math.isfinite(scale)
                or abs(float(scale)) * largest_b_scale >= _HALF_FLOAT32_MAX
                or not (zero is None or type(zero) is dtype.type)
                or generation != dispatch.generation()):
            return None
        return run(a, 0 if zero is None else int(zero), reference_multipliers(scale, b_scale),
                   resolve_threads(n_threads))

    def _bind_parameters(self, slots):
        """After the plans ran ``slots``: the recent call's kernel run with
        A's zero point and the multipliers per call, where its implementation
        binds so (Prepared.bind_parameters), for A of this call's form (the
        latest form replaces an earlier one)."""
        a = slots["a"]
        bound = self._parameters_run
        generation = dispatch.generation()
        if type(a) is not np.ndarray or (bound is not None and bound[:2] == (a.dtype, a.shape)
                                         and bound[5] == generation):
            return  # (this form bound and current: the call's values went to the plans)
        recent = self._plans.recent()
        if recent is None or dispatch.generation() != generation:
            return
        forms, plan, arrays, _, _ = recent
        # The recent call is this one (another thread's call of another form
        # may have come in between): its A of this dtype and shape.
        if not any(form[0] == "a" and form[2] == a.dtype and form[4] == a.shape
                   for form in forms):
            return
        bind = plan.prepared.bind_parameters
        run = bind(recent_call(recent, self._kernel_pack)) if bind is not None else None
        if run is not None:
            b_scale = arrays["b_scale"]
            self._parameters_run = (a.dtype, a.shape, run, b_scale,
                                    float(np.abs(b_scale.astype(np.float64)).max()),
                                    generation)

    def data_runner(self):
        """``run(n_threads, *data)``: this operator's call for a caller whose
        every call brings the data operands only (by position, in slot
        order) and no ``out``, as a session's steps do; ``None`` when its
        calls bring parameters as well.

        A call of the form the operator has bound (data of the recent
        calls' dtypes and shapes) goes straight to its kernel run, after a
        check of each operand's type, dtype and shape; any other is this
        operator's call, whose results it equals.
        """
        if self._parameter_names:
            return None
        names = self._data_names
        binder = self._binder
        generation = dispatch.generation
        if len(names) == 1:
            # One operand (a convolution's image), the form checked inline:
            # this is most of a small step's Python.
            name = names[0]

            def run_one(n_threads, data):
                bound = binder.bound
                if (bound is not None and type(data) is np.ndarray
                        and bound.generation == generation()):
                    form = bound.form
                    if data.shape == form[1] and (data.dtype is form[0]
                                                  or data.dtype == form[0]):
                        fresh = bound.fresh
                        if fresh is not None:
                            result = fresh(data, resolve_threads(n_threads))
                            if result is not None:
                                return result
                        return bound.run_into_new(n_threads, data)
                return self(n_threads=n_threads, **{name: data})

            return run_one

        def run(n_threads, *data):
            bound = binder.bound
            if bound is not None and bound.generation == generation():
                form = bound.form
                index = 0
                for operand in data:
                    if not (type(operand) is np.ndarray and operand.dtype == form[index]
                            and operand.shape == form[index + 1]):
                        break
                    index += 2
                else:
                    if index == len(form):
                        return bound.run(n_threads, *data)
            return self(n_threads=n_threads, **dict(zip(names, data)))

        return run

    def channels_last_runner(self, input_channels_last, output_channels_last):
        """``run(n_threads, image)`` for a caller that keeps a convolution's
        images or outputs channels-last, as a session keeps the tensors
        between its convolutions: ``image`` is (N, H, W, C) when
        ``input_channels_last``, else (N, C, H, W), and the result (N, OH,
        OW, OC) when ``output_channels_last``, else (N, OC, OH, OW).  The
        values are this operator's, bit for bit.

        Each image shape is checked once, through this operator's own
        validation, and bound to the kernels where they take the layouts
        (``Prepared.bind_channels_last``); any other call is this operator's
        on the image transposed (and its output transposed back).  ``None``
        for an operator other than a convolution whose every slot but the
        image is bound.
        """
        if not self._runs_channels_last():
            return None
        to_channels_first, to_channels_last = (0, 3, 1, 2), (0, 2, 3, 1)

        def general(n_threads, image):
            if input_channels_last:
                image = np.ascontiguousarray(np.asarray(image).transpose(to_channels_first))
            result = self(image, n_threads=n_threads)
            return (np.ascontiguousarray(result.transpose(to_channels_last))
                    if output_channels_last else result)

        # The last form bound, as one tuple (replaced whole, so that a run in
        # another thread never reads half of it): (dtype, shape, generation,
        # kernel run).
        last = [(None, None, None, None)]

        def run(n_threads, image):
            if type(image) is np.ndarray and image.ndim == 4:
                dtype, shape = image.dtype, image.shape
                known = last[0]
                if (dtype is known[0] and shape == known[1]
                        and known[2] == dispatch.generation()):
                    kernel_run = known[3]
                else:
                    generation = dispatch.generation()
                    kernel_run = self._bound_channels_last(dtype, shape, input_channels_last,
                                                           output_channels_last)
                    last[0] = (dtype, shape, generation, kernel_run)
                if kernel_run is not None:
                    result = kernel_run(image, n_threads)
                    if result is not None:
                        return result
            return general(n_threads, image)

        return run

    def takes_channels_last(self, image_shape, dtype=None):
        """Whether this operator's kernels run images of ``image_shape``
        (channels-first) and ``dtype`` (default: the bound input zero
        point's, else uint8) kept channels-last (:meth:`channels_last_runner`)
        with nothing transposed: a convolution on the GEMM kernels always
        does, a depthwise one of 128 channels or more where its image has at
        most 256 outputs per channel."""
        if not self._runs_channels_last() or len(image_shape) != 4:
            return False
        batch, channels, height, width = image_shape
        dtype = np.dtype(dtype if dtype is not None else self._image_dtype())
        return self._bound_channels_last(dtype, (batch, height, width, channels), True,
                                         True) is not None

    def _runs_channels_last(self):
        return (self.operator.name == "QUANTIZED_LINEAR_CONVOLUTION"
                and self.runtime_slots == ("input",))

    def _bound_channels_last(self, dtype, shape, input_channels_last, output_channels_last):
        """The kernels' run of images of this dtype and shape (as given) in
        these layouts, or None where they have none; bound once per form and
        set of implementations."""
        key = (dtype, shape, input_channels_last, output_channels_last, dispatch.generation())
        bound = self._channels_last_binds.get(key, _UNBOUND)
        if bound is _UNBOUND:
            bound = self._channels_last_binds[key] = self._bind_channels_last(
                dtype, shape, input_channels_last, output_channels_last)
        return bound

    def _bind_channels_last(self, dtype, shape, input_channels_last, output_channels_last):
        """The operator's call on zeros of the image's channels-first shape
        (:meth:`_recent_call`), bound by its implementation."""
        if input_channels_last:
            shape = (shape[0], shape[3], shape[1], shape[2])
        recent = self._recent_call(dtype, shape)
        if recent is None or recent[1].bind_channels_last is None:
            return None
        return recent[1].bind_channels_last(recent[0], input_channels_last, output_channels_last)

    def _recent_call(self, dtype, shape):
        """(call, prepared) of this operator's call on zeros of ``dtype`` and
        (channels-first) ``shape``, as its implementation binds it, or None.
        The call validates the image and leaves its plan as the plans'
        recent call; another thread's call in between (a plan of another
        form) is seen, and the call made again."""
        slots = {"input": np.zeros(shape, dtype)}
        for _ in range(3):
            self._plans.run(slots, self._call_attributes, self.feature_level, out=None,
                            n_threads=1, packed=self._kernel_pack, constants=self._constants,
                            fast=None, tail=self._tail)
            recent = self._plans.recent()
            if recent is None:
                return None
            if any(form[0] == "input" and form[2] == dtype and form[4] == shape
                   for form in recent[0]):
                return recent_call(recent, self._kernel_pack), recent[1].prepared
        return None

    def followed_runner(self, following, image_shape, dtype=None):
        """``run(n_threads, image)`` of this convolution and then
        ``following`` (a compiled convolution of its output, say a
        depthwise one after a 1 x 1 expansion) as one run of the kernels,
        for channels-first images of ``image_shape`` and ``dtype`` (default:
        as :meth:`takes_channels_last`): the output is ``following``'s on
        this one's, bit for bit, and this one's output is never stored whole.
        Any other image runs the two calls in turn.  ``None`` where the
        kernels do not run the pair (each then runs on its own), images of
        that shape and dtype included that the two do not take together.
        """
        if (not self._runs_channels_last() or not isinstance(following, CompiledOperator)
                or not following._runs_channels_last() or len(image_shape) != 4):
            return None
        dtype = np.dtype(dtype if dtype is not None else self._image_dtype())
        image_shape = tuple(image_shape)
        if self._bound_followed(following, dtype, image_shape) is None:
            return None

        def run(n_threads, image):
            if type(image) is np.ndarray and image.dtype == dtype and image.shape == image_shape:
                made = self._bound_followed(following, dtype, image_shape)
                result = None if made is None else made(image, resolve_threads(n_threads))
                if result is not None:
                    return result
            return following(self(image, n_threads=n_threads), n_threads=n_threads)

        return run

    def _bound_followed(self, following, dtype, shape):
        """The kernels' run of this operator and ``following`` on images of
        this dtype and shape, or None; bound once per set of implementations."""
        key = (following, dtype, shape, dispatch.generation())
        bound = self._followed_binds.get(key, _UNBOUND)
        if bound is _UNBOUND:
            bound = None
            # A 1 x 1 convolution and a depthwise one, before anything runs.
            filters = (self._constants.get("filter"), following._constants.get("filter"))
            if (all(isinstance(filter, np.ndarray) and filter.ndim == 4 for filter in filters)
                    and filters[0].shape[2:] == (1, 1) and filters[1].shape[1] == 1):
                try:
                    mine = self._recent_call(dtype, shape)
                    if mine is not None and mine[1].bind_followed is not None:
                        theirs = following._recent_call(mine[0].output_dtype,
                                                        mine[0].output_shape)
                        if theirs is not None:
                            bound = mine[1].bind_followed(mine[0], *theirs)
                except ValidationError:
                    bound = None  # (images the two do not take together: each call says why)
            self._followed_binds[key] = bound
        return bound

    def _image_dtype(self):
        """The dtype of images this operator's bound input zero point gives
        (uint8 without one)."""
        zero_point = self._constants.get("input_zero_point")
        return np.uint8 if zero_point is None else np.asarray(zero_point).dtype

    def _run_bound(self, slots, n_threads):
        """The call on the bound kernel run when it is of the bound form
        (data of its dtypes and shapes, the very parameter objects), else ``None``."""
        bound = self._binder.bound
        form = bound.form
        data = [slots[name] for name in self._data_names]
        for index, operand in enumerate(data):
            if not (type(operand) is np.ndarray and operand.dtype == form[2 * index]
                    and operand.shape == form[2 * index + 1]):
                return None
        if not all(map(is_, map(slots.__getitem__, self._parameter_names),
                       bound.parameters)):
            return None
        if bound.generation != dispatch.generation():
            return None
        return bound.run(n_threads, *data)

    def _planned(self, slots, out, n_threads, fast):
        """The call through the plans (slots in slot order), then its kernel
        run bound for calls like it."""
        result = self._plans.run(slots, self._call_attributes, self.feature_level, out=out,
                                 n_threads=resolve_threads(n_threads), packed=self._kernel_pack,
                                 constants=self._constants, fast=fast, tail=self._tail)
        if out is None and self._spec.binds:
            self._binder.bind(self._plans, slots, self._data_names, self._kernel_pack)
            if self._binds_parameters:
                self._bind_parameters(slots)
        return result


class CompiledQuantizedPair(CompiledOperator):
    """A compiled operator of two quantized operands, each with its scale and
    zero point, and an output scale and zero point: QUANTIZED_LINEAR_MATRIX_MULTIPLY
    and ELEMENT_WISE_QUANTIZED_LINEAR_ADD, whose fast paths take those eight
    slots in order.  Its slots are named parameters, so that a small call
    reaches the fast path (qops.backends.native._lean) without gathering
    keywords into a dictionary first: at a few thousand multiply-adds that
    was a third of a matrix multiply."""

    _AFTER_A = ("a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "output_scale",
                "output_zero_point")

    def __init__(self, operator, version, constants, attributes):
        super().__init__(operator, version, constants, attributes)
        # Per slot after a: its bound value (None when the call gives it),
        # and whether it is bound.
        self._kept = tuple(constants.get(name) for name in self._AFTER_A)
        self._is_bound = tuple(name in constants for name in self._AFTER_A)
        self._runtime_indices = tuple(self._AFTER_A.index(name) + 1
                                      for name in self.runtime_slots[1:])
        self._b_is_data = "b" in self._data_names
        # Per count of slots given by position after a: the seven slots
        # after a, picked from (the positional ones + _kept); a slot the
        # call gives but not by position is picked from _kept, where it is
        # None: absent.
        after_a = self.runtime_slots[1:]

        def picks(count):
            return [after_a.index(name) if name in after_a[:count] else count + position
                    for position, name in enumerate(self._AFTER_A)]

        self._scatters = tuple(_picker(picks(count)) for count in range(len(after_a) + 1))
        self._parameters_of = _picker(1 + self._AFTER_A.index(name)
                                      for name in self._parameter_names)
        # The fast path a call tries first, and whether it takes n_threads
        # as given (a learnt one checks it) or resolved (a fixed one).
        if self._spec.learns_fast:
            self._direct, self._resolves_threads = self._fast, False
        else:
            self._direct, self._resolves_threads = self._fixed_fast, True

    def __call__(self, a=None, *args, out=None, n_threads=None, a_scale=_UNSET,
                 a_zero_point=_UNSET, b=_UNSET, b_scale=_UNSET, b_zero_point=_UNSET,
                 output_scale=_UNSET, output_zero_point=_UNSET, **slots):
        if slots:  # every slot of the operator is a named parameter
            self._refuse(slots)
        unset = _UNSET
        if args:
            if (len(args) < len(self._scatters) and a_scale is unset
                    and a_zero_point is unset and b is unset and b_scale is unset
                    and b_zero_point is unset and output_scale is unset
                    and output_zero_point is unset):
                (a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale,
                 output_zero_point) = self._scatters[len(args)](args + self._kept)
            else:  # by position and by keyword, or too many
                (a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale,
                 output_zero_point) = self._with_positional(args, (
                     a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale,
                     output_zero_point))
        else:
            kept, is_bound = self._kept, self._is_bound
            # A slot not given takes its bound value (None: absent); a bound
            # one given again is refused.
            if a_scale is unset:
                a_scale = kept[0]
            elif is_bound[0]:
                self._refuse(("a_scale",))
            if a_zero_point is unset:
                a_zero_point = kept[1]
            elif is_bound[1]:
                self._refuse(("a_zero_point",))
            if b is unset:
                b = kept[2]
            elif is_bound[2]:
                self._refuse(("b",))
            if b_scale is unset:
                b_scale = kept[3]
            elif is_bound[3]:
                self._refuse(("b_scale",))
            if b_zero_point is unset:
                b_zero_point = kept[4]
            elif is_bound[4]:
                self._refuse(("b_zero_point",))
            if output_scale is unset:
                output_scale = kept[5]
            elif is_bound[5]:
                self._refuse(("output_scale",))
            if output_zero_point is unset:
                output_zero_point = kept[6]
            elif is_bound[6]:
                self._refuse(("output_zero_point",))
        direct = self._direct
        fast = direct.get() if direct is not None else None
        if fast is not None:
            result = fast.run(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale,
                              output_zero_point, out,
                              resolve_threads() if n_threads is None and self._resolves_threads
                              else n_threads)
            if result is not None:
                return result
        every = (a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale,
                 output_zero_point)
        bound = self._binder.bound
        if bound is not None and out is None:
            # The bound form: A (and B when the call gives it) of its dtype
            # and shape, the very parameter objects.
            form = bound.form
            if (type(a) is np.ndarray and a.dtype == form[0] and a.shape == form[1]
                    and all(map(is_, self._parameters_of(every), bound.parameters))
                    and bound.generation == dispatch.generation()):
                if not self._b_is_data:
                    return bound.run(n_threads, a)
                if type(b) is np.ndarray and b.dtype == form[2] and b.shape == form[3]:
                    return bound.run(n_threads, a, b)
        named = {"a": a}  # the call's slots in slot order, as the plans key
        for name, index in zip(self.runtime_slots[1:], self._runtime_indices):
            named[name] = every[index]
        return self._planned(named, out, n_threads, self._fast.get())

    def _with_positional(self, args, keywords):
        """The seven slots after ``a`` of a call giving some of them by
        position (the slots the call takes after ``a``, in order) and
        ``keywords`` (each ``_UNSET`` where not given by keyword)."""
        if len(args) > len(self._runtime_indices):
            self._too_many_positional()
        values = list(self._kept)
        by_position = set()
        for index, value in zip(self._runtime_indices, args):
            values[index - 1] = value
            by_position.add(index - 1)
        for index, value in enumerate(keywords):
            if value is not _UNSET:
                name = self._AFTER_A[index]
                if self._is_bound[index]:
                    self._refuse((name,))
                if index in by_position:
                    fail(self.operator, f"{name} given twice", slot=name)
                values[index] = value
        return values


def _same_attribute(given, wanted):
    """Whether a (validated) attribute is ``wanted`` (``None``: absent)."""
    if wanted is None or given is None:
        return given is wanted
    try:
        return bool(given == wanted)
    except (TypeError, ValueError):  # an array: not the plain default
        return False


def _picker(indices):
    """A function of a tuple giving its items at ``indices``, as a tuple."""
    indices = tuple(indices)
    if not indices:
        return lambda values: ()
    if len(indices) == 1:
        index = indices[0]
        return lambda values: (values[index],)
    return itemgetter(*indices)


_CLASSES = {"QUANTIZED_LINEAR_MATRIX_MULTIPLY": CompiledQuantizedPair,
            "ELEMENT_WISE_QUANTIZED_LINEAR_ADD": CompiledQuantizedPair}


def compile(name, *, feature_level=None, **constants_and_attributes):
    """Bind constant slots and attributes of an operator, validated once.

    Any input slot but the data operand may be bound: a weight with its
    quantization parameters, the activations' and the output's scales and
    zero points, a residual add's B.  What is not bound is given at each
    call; a bound slot given again is refused.  A bound weight is packed
    into the kernels' layout on its first call and shared by every later one.

    Parameters
    ----------
    name : str
        The registry name or the function name of an operator with constant
        slots: ``QUANTIZED_LINEAR_CONVOLUTION``, ``QUANTIZED_LINEAR_MATRIX_MULTIPLY``,
        ``CONVOLUTION_INTEGER``, ``MATRIX_MULTIPLY_INTEGER``,
        ``MATRIX_MULTIPLY_INTEGER_TO_FLOAT``, ``ELEMENT_WISE_QUANTIZED_LINEAR_ADD``,
        ``QUANTIZED_LINEAR_AVERAGE_POOLING``, ``ELEMENT_WISE_QUANTIZE_LINEAR``,
        ``ELEMENT_WISE_DEQUANTIZE_LINEAR``, ``QUANTIZE``, ``DEQUANTIZE``,
        ``QuantizeLinear``, ``DequantizeLinear`` or ``MatMulNBits``.
    feature_level : optional
        As for the DirectML operator functions.  An ONNX operator takes
        ``opset=`` instead, among the keywords.
    **constants_and_attributes
        Slots to bind, by name, and the attributes the operator's function
        takes.  The data operands (``input``, ``a``, ``x``) are never bound.
        Binding a weight (a convolution's ``filter``, a matrix multiply's
        ``b``) binds its group: ``filter_scale``, ``filter_zero_point`` and
        ``bias``; ``b_scale`` and ``b_zero_point`` (and
        MATRIX_MULTIPLY_INTEGER_TO_FLOAT's ``bias``); MatMulNBits' ``b`` its
        ``scales``, ``zero_points``, ``g_idx`` and ``bias``, beside the
        attributes ``k``, ``n``, ``bits``, ``block_size`` and
        ``accuracy_level`` (its weight is packed once).  Those of the group
        not given are bound as absent, and none is bound without the weight.
        Any other optional slot given as ``None`` is bound as absent.

    Returns
    -------
    CompiledOperator
        Call it with the slots not bound, by keyword or in slot order
        (``runtime_slots``), plus ``out=`` and ``n_threads=``; its results
        equal the plain function's bit for bit.  It pickles as its bound
        slots and attributes.

    Raises
    ------
    qops.ValidationError
        An operator without constant slots; a data operand, an unknown
        keyword, or a weight's parameter without the weight; and whatever the
        function would refuse about the bound slots and attributes (checked
        here against stand-ins for the slots each call gives), naming it.

    Examples
    --------
    >>> import numpy as np
    >>> add = compile("ELEMENT_WISE_QUANTIZED_LINEAR_ADD", a_scale=0.5,
    ...               b=np.array([[1, 2]], np.uint8), b_scale=1.0, output_scale=1.0)
    >>> add.runtime_slots
    ('a', 'a_zero_point', 'b_zero_point', 'output_zero_point')
    >>> add(np.array([[10, 20]], np.uint8))
    array([[ 6, 12]], dtype=uint8)
    """
    try:
        op = registry.get(name)
    except KeyError as error:
        raise ValidationError(str(error.args[0]), given=name) from None
    spec = COMPILABLE.get(op.name)
    if spec is None:
        fail(op, "has no constant slots to bind; call the function directly")
    keywords = dict(constants_and_attributes)
    version = resolve_version(op, feature_level, keywords.pop("opset", None))
    slots = {s.name: s for s in op.inputs}
    for key in keywords:
        if key in spec.data:
            fail(op, f"{key} is given when the operator is called, not compiled", slot=key)
        if key not in slots and key not in spec.default_attributes():
            takes = ", ".join(n for n in slots if n not in spec.data)
            fail(op, f"{key} is not a slot or attribute of this operator; it binds {takes} and "
                     f"takes the attributes {', '.join(spec.default_attributes()) or '(none)'}",
                 slot=key)
    constants = {k: v for k, v in keywords.items() if k in slots}
    attributes = {k: v for k, v in keywords.items() if k not in slots}
    for key, value in constants.items():
        if isinstance(value, TensorDesc):
            fail(op, f"{key} is a TensorDesc; compile binds values (pass qops.validate "
                     "descriptions)", slot=key)
    group = [k for k in spec.weight_group if k in constants]
    if group:
        if constants.get(spec.weight) is None:
            fail(op, f"{spec.weight} is required to compile with {group[-1]} "
                     f"({slots[spec.weight].source_name}): a weight's quantization parameters "
                     "are bound with it", slot=spec.weight)
        for key in spec.weight_group:
            if constants.setdefault(key, None) is None and not slots[key].optional:
                fail(op, f"{key} is required to compile with {spec.weight} "
                         f"({slots[key].source_name}): a weight's quantization parameters are "
                         "bound with it", slot=key)
    for key, value in constants.items():
        if value is None and not slots[key].optional:
            fail(op, f"{key} is required to compile ({slots[key].source_name}); bind a value "
                     "or leave it to the call", slot=key)
    # Validate the bound slots with the simplest calls that fit them: every
    # error left is about the constants or attributes.
    call_attributes = dict(spec.default_attributes(), **attributes)
    stand_ins = spec.stand_ins(op, version, constants, call_attributes)
    every = {s: (constants[s] if s in constants else stand_ins.get(s)) for s in slots}
    spec.prepare(every, dict(call_attributes), version)
    # Copies the caller cannot change (a list read as the function reads it).
    frozen = {k: np.array(v, copy=True) if isinstance(v, (np.ndarray, list, tuple)) else v
              for k, v in constants.items()}
    for array in frozen.values():
        if isinstance(array, np.ndarray):
            array.flags.writeable = False
    # In slot order: the plans meet them so.
    frozen = {s: frozen[s] for s in slots if s in frozen}
    return _CLASSES.get(op.name, CompiledOperator)(op, version, frozen, attributes)


def _recompile(name, feature_level, constants, attributes):
    """A pickled :class:`CompiledOperator` on arrival."""
    version = ({"opset": feature_level} if isinstance(feature_level, Opset)
               else {"feature_level": feature_level})
    return compile(name, **version, **constants, **attributes)
