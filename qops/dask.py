"""qops on dask arrays: the operators as lazy graphs, from threads to a cluster.

Every function here takes the keywords of the in-memory function of the same
name; any array argument (scales and zero points included) may be a
``dask.array.Array`` or a NumPy array, and the result is a dask array
whose chunks are computed by that in-memory function.  Results equal the
in-memory function's bit for bit, on any scheduler: each output element is
computed by the same kernels from the same operands, only in pieces.

How each operator is cut (``docs/dask.rst`` has the whole story):

* convolutions and pooling: chunks over the batch (and over the channels
  for pooling, and over output channels where a convolution's filter is
  chunked, one group only); a chunked channel or spatial axis is refused
  with a :class:`qops.ValidationError` that says to rechunk;
* matrix multiplies: chunks over the batch axes and the rows of A; A's
  columns are made one chunk, and B is whole in every task (sliced to the
  task's batch entries where A and B both have them);
* quantize and dequantize: any chunking; per-axis parameters are sliced per
  chunk, and blocked parameters need chunk edges on block edges, so the
  input is rechunked to the nearest such edges when it has others;
* DynamicQuantizeLinear: a reduction for the global minimum and maximum
  first, then a map with the scale and zero point that implies.

Validation runs when the graph is built, from the arrays' shapes and types
(NumPy parameters' values too), and raises the in-memory function's
:class:`qops.ValidationError` before any task exists.  Constant operands
(NumPy arguments, and a compiled operator) enter the graph once, as one
key each, so a distributed scheduler sends each to a worker once, however
many chunks use it.
"""

from __future__ import annotations

import math

import numpy as np

try:
    import dask
    import dask.array as da
    from dask.base import tokenize
    from dask.highlevelgraph import HighLevelGraph
except ImportError as error:  # pragma: no cover - exercised without dask only
    raise ImportError('qops.dask needs dask: pip install "qops[dask]"') from error

import qops
from qops.errors import ValidationError
from qops.ops.validation import TensorDesc
from qops import registry
from qops.registry import dtypes

__all__ = [
    "quantized_linear_convolution", "convolution_integer", "quantized_linear_matrix_multiply",
    "matrix_multiply_integer", "matrix_multiply_integer_to_float",
    "quantized_linear_average_pooling", "quantize_linear", "dequantize_linear", "quantize",
    "dequantize", "element_wise_quantize_linear", "element_wise_dequantize_linear",
    "element_wise_quantized_linear_add", "dynamic_quantize_linear", "compile",
    "DaskCompiledOperator",
]


# -- the pieces every operator shares -----------------------------------------------------

class _Chunk:
    """One task's work: call a qops function on its operands, each cut to the
    task's part first.  An object (not a tuple) so that dask never looks
    inside it for keys; it pickles as its fields."""

    __slots__ = ("function", "names", "cuts", "keywords")

    def __init__(self, function, names, cuts, keywords):
        self.function = function      # a qops function name, or a compiled operator's key
        self.names = names            # slot names, in the order the operands follow
        self.cuts = cuts              # per slot: None (whole) or a tuple of slices
        self.keywords = keywords

    def __call__(self, *operands):
        arguments = {}
        for name, cut, value in zip(self.names, self.cuts, operands):
            if cut is not None and value is not None:
                value = np.asarray(value)[cut]
            arguments[name] = value
        if self.function == _COMPILED:
            function = arguments.pop(_COMPILED)
        else:
            function = getattr(qops, self.function)
        return function(**arguments, **self.keywords)

    def __reduce__(self):
        return (_Chunk, (self.function, self.names, self.cuts, self.keywords))


# The slot a compiled operator travels in (never a slot name of an operator).
_COMPILED = "__compiled__"


def _constant(value):
    """A NumPy argument as one graph key (a one-chunk dask array), so every
    task that reads it shares it; dask arrays and plain values as given."""
    if isinstance(value, (np.ndarray, np.generic)) and not isinstance(value, da.Array):
        array = np.asarray(value)
        return da.from_array(array, chunks=array.shape or (), name="qops-constant-"
                             + tokenize(array.dtype.str, array.shape, array.tobytes()))
    return value


def _whole(value):
    """A dask parameter as one chunk: tasks cut their part out of it."""
    return value.rechunk(-1) if isinstance(value, da.Array) and value.npartitions > 1 else value


def _describe(value):
    """What validation is given for an argument at graph build: a dask
    array's type and shape; anything else as it is, values included."""
    if isinstance(value, da.Array):
        return TensorDesc(value.dtype, value.shape)
    return value


def _validate(function, slots, keywords):
    """The in-memory function's validation of the whole call (shapes, types,
    NumPy values), before any task exists: its output shape and dtype."""
    options = {k: v for k, v in keywords.items() if k not in ("n_threads", "out")}
    validated = qops.validate(function, **{k: _describe(v) for k, v in slots.items()},
                              **options)
    return tuple(validated.output_shape), _dtype(validated.output_dtype)


def _dtype(name):
    """The NumPy dtype of a validated output type (as :class:`qops.Validated` names it)."""
    return dtypes.to_numpy(dtypes.parse_dtype(name))


def _refuse(function, slot, message):
    """A ValidationError naming the operator as the registry does."""
    operator = registry.get(function).name
    raise ValidationError(f"{operator}: {slot} {message}", operator=operator, slot=slot)


def _operand(value):
    """A task's operand: a dask array's one key (it is one chunk), or the value."""
    if isinstance(value, da.Array):
        return (value.name,) + (0,) * value.ndim
    return value


def _array(label, token, tasks, chunks, dtype, collections):
    """The dask array of ``tasks`` (output block index -> task)."""
    name = f"qops-{label}-{token}"
    graph = {(name,) + index: task for index, task in tasks.items()}
    collections = [c for c in collections if isinstance(c, da.Array)]
    layer = HighLevelGraph.from_collections(name, graph, dependencies=collections)
    return da.Array(layer, name, chunks, dtype=dtype,
                    meta=np.empty((0,) * len(chunks), dtype))


def _starts(chunks):
    """Each chunk's (start, stop) along one axis."""
    edges = np.cumsum((0,) + tuple(chunks))
    return list(zip(edges[:-1].tolist(), edges[1:].tolist()))


def _block_cut(start, stop, block):
    """The slice of a parameter with one value per ``block`` input elements
    along an axis that a chunk [start, stop) of that axis reads."""
    return slice(start // block, -(-stop // block))


def _aligned_chunks(chunks, block):
    """Chunks along an axis with every inner edge moved up to a multiple of
    ``block`` (unchanged when they all are)."""
    edges = np.cumsum(chunks)[:-1]
    if block <= 1 or not np.any(edges % block):
        return tuple(chunks)
    total = int(sum(chunks))
    moved = sorted({min(total, -(-int(edge) // block) * block) for edge in edges} - {0, total})
    bounds = [0] + moved + [total]
    return tuple(b - a for a, b in zip(bounds[:-1], bounds[1:]))


def _keywords(**keywords):
    return {k: v for k, v in keywords.items() if v is not None}


def _no_out(operator, out):
    if out is not None:
        _refuse(operator, "out", "given; a dask result is computed by dask: use "
                "dask.array.store to write it into an array")


# -- quantize and dequantize ---------------------------------------------------------------

def _parameter_axes(parameter_shape, input_shape, *, axis=None, block_size=0):
    """Per parameter axis: the input axis it runs along and the input
    elements each of its values covers (its block); the input axis is None
    where the parameter is one value for the whole tensor.

    ONNX (``axis`` given): a one-value parameter is per tensor, a 1-D one
    per axis, one of the input's rank blocked along ``axis``.  DirectML: the
    parameter's axes are the input's trailing axes, each of size 1 or a
    divisor of the input's."""
    rank = len(input_shape)
    if axis is not None:
        axis = axis % rank if rank else 0
        if block_size:
            return tuple((d, block_size if d == axis else 1) for d in range(rank))
        if len(parameter_shape) <= 1 and math.prod(parameter_shape) == 1:
            return ((None, 1),) * len(parameter_shape)
        return ((axis, 1),)
    offset = rank - len(parameter_shape)
    return tuple((None, 1) if size == 1 else (offset + j, input_shape[offset + j] // size)
                 for j, size in enumerate(parameter_shape))


def _element_wise(function, input_slot, slots, keywords, *, onnx):
    """A quantize or dequantize of any chunking: one task per input chunk,
    each parameter cut to the chunk's part."""
    out = keywords.pop("out", None)
    _no_out(function, out)
    x = slots[input_slot]
    output_shape, dtype = _validate(function, slots, keywords)
    x = x if isinstance(x, da.Array) else da.from_array(np.asarray(x))
    axis = keywords.get("axis", 1) if onnx else None
    block_size = keywords.get("block_size", 0) or 0
    parameters = {k: v for k, v in slots.items() if k != input_slot}
    axes = {k: _parameter_axes(np.shape(v), x.shape, axis=axis, block_size=block_size)
            for k, v in parameters.items() if v is not None}
    # Chunk edges on block edges: per input axis, the largest block read there.
    chunks = list(x.chunks)
    for layout in axes.values():
        for d, block in layout:
            if d is not None and block > 1:
                chunks[d] = _aligned_chunks(chunks[d], block)
    x = x.rechunk(tuple(chunks)) if tuple(chunks) != x.chunks else x
    parameters = {k: _whole(_constant(v)) for k, v in parameters.items()}
    names = (input_slot,) + tuple(parameters)
    spans = [_starts(c) for c in x.chunks]
    tasks = {}
    for index in np.ndindex(*x.numblocks):
        cuts = [None]
        for name in parameters:
            if parameters[name] is None or all(d is None for d, _ in axes[name]):
                cuts.append(None)
                continue
            cut = []
            for d, block in axes[name]:
                if d is None:
                    cut.append(slice(None))
                else:
                    cut.append(_block_cut(*spans[d][index[d]], block))
            cuts.append(tuple(cut))
        chunk = _Chunk(function, names, tuple(cuts), keywords)
        tasks[index] = (chunk, (x.name,) + index, *(_operand(v) for v in parameters.values()))
    token = tokenize(function, x.name, [getattr(v, "name", v) for v in parameters.values()],
                     sorted(keywords.items(), key=lambda item: item[0]).__repr__())
    assert output_shape == x.shape
    return _array(function, token, tasks, x.chunks, dtype, [x, *parameters.values()])


def quantize_linear(x, y_scale, y_zero_point=None, *, out=None, **keywords):
    """ONNX QuantizeLinear on a dask array; see :func:`qops.quantize_linear`."""
    return _element_wise("quantize_linear", "x", dict(x=x, y_scale=y_scale,
                                                      y_zero_point=y_zero_point),
                         dict(keywords, out=out), onnx=True)


def dequantize_linear(x, x_scale, x_zero_point=None, *, out=None, **keywords):
    """ONNX DequantizeLinear on a dask array; see :func:`qops.dequantize_linear`."""
    return _element_wise("dequantize_linear", "x", dict(x=x, x_scale=x_scale,
                                                        x_zero_point=x_zero_point),
                         dict(keywords, out=out), onnx=True)


def quantize(input, scale, zero_point=None, *, out=None, **keywords):
    """DirectML QUANTIZE on a dask array; see :func:`qops.quantize`."""
    return _element_wise("quantize", "input", dict(input=input, scale=scale,
                                                   zero_point=zero_point),
                         dict(keywords, out=out), onnx=False)


def dequantize(input, scale, zero_point=None, *, out=None, **keywords):
    """DirectML DEQUANTIZE on a dask array; see :func:`qops.dequantize`."""
    return _element_wise("dequantize", "input", dict(input=input, scale=scale,
                                                     zero_point=zero_point),
                         dict(keywords, out=out), onnx=False)


def element_wise_quantize_linear(input, scale, zero_point=None, *, out=None, **keywords):
    """ELEMENT_WISE_QUANTIZE_LINEAR on a dask array; see
    :func:`qops.element_wise_quantize_linear`."""
    return _element_wise("element_wise_quantize_linear", "input",
                         dict(input=input, scale=scale, zero_point=zero_point),
                         dict(keywords, out=out), onnx=False)


def element_wise_dequantize_linear(input, scale, zero_point=None, *, out=None, **keywords):
    """ELEMENT_WISE_DEQUANTIZE_LINEAR on a dask array; see
    :func:`qops.element_wise_dequantize_linear`."""
    return _element_wise("element_wise_dequantize_linear", "input",
                         dict(input=input, scale=scale, zero_point=zero_point),
                         dict(keywords, out=out), onnx=False)


def _dynamic_parameters(extremes, rank, keywords):
    """The in-memory function's scale and zero point for the global range:
    on the two extremes (as a tensor of the input's rank) it finds the same
    minimum and maximum as on the whole input, so the same parameters."""
    _, scale, zero_point = qops.dynamic_quantize_linear(
        np.asarray(extremes).reshape((1,) * (rank - 1) + (2,)), **keywords)
    return scale, zero_point


class _DynamicChunk:
    """One chunk quantized as the whole is: the in-memory function on the
    chunk with the global extremes appended, whose own range is then the
    global one; the appended values are dropped."""

    __slots__ = ("keywords",)

    def __init__(self, keywords):
        self.keywords = keywords

    def __call__(self, x, extremes):
        flat = np.asarray(x).reshape(-1)
        joined = np.concatenate([flat, np.asarray(extremes).astype(flat.dtype)])
        rank = max(1, np.ndim(x))
        y, _, _ = qops.dynamic_quantize_linear(joined.reshape((1,) * (rank - 1) + (-1,)),
                                               **self.keywords)
        return y.reshape(-1)[:flat.size].reshape(np.shape(x))

    def __reduce__(self):
        return (_DynamicChunk, (self.keywords,))


def dynamic_quantize_linear(input, *, n_threads=None, **keywords):
    """DYNAMIC_QUANTIZE_LINEAR on a dask array; see :func:`qops.dynamic_quantize_linear`.

    Returns
    -------
    (output, scale, zero_point) : tuple of dask arrays
        The scale and zero point come from one reduction over the whole
        input (its minimum and maximum); every chunk is then quantized with
        them, so the output equals the in-memory function's.
    """
    function = "dynamic_quantize_linear"
    output_shape, dtype = _validate(function, dict(input=input), keywords)
    x = input if isinstance(input, da.Array) else da.from_array(np.asarray(input))
    keywords = _keywords(n_threads=n_threads, **keywords)
    if x.size:
        extremes = da.stack([da.minimum(x.min(), 0), da.maximum(x.max(), 0)])
    else:
        extremes = da.zeros(2, x.dtype)
    extremes = extremes.rechunk(-1)
    # The in-memory function's own parameters for the global range.
    rank = max(1, x.ndim)
    parameters = dask.delayed(_dynamic_parameters, pure=True, nout=2)(extremes, rank, keywords)
    # The in-memory function's parameter shapes, from a one-element stand-in.
    _, scale_like, zero_like = qops.dynamic_quantize_linear(
        np.zeros((1,) * rank, x.dtype), **keywords)
    scale = da.from_delayed(parameters[0], np.shape(scale_like), np.asarray(scale_like).dtype)
    zero_point = da.from_delayed(parameters[1], np.shape(zero_like), np.asarray(zero_like).dtype)
    chunk = _DynamicChunk(keywords)
    tasks = {index: (chunk, (x.name,) + index, (extremes.name, 0))
             for index in np.ndindex(*x.numblocks)}
    output = _array(function, tokenize(function, x.name, repr(keywords)), tasks, x.chunks,
                    dtype, [x, extremes])
    return output, scale, zero_point


# -- element-wise add --------------------------------------------------------------------

def element_wise_quantized_linear_add(a, a_scale, a_zero_point, b, b_scale, b_zero_point,
                                      output_scale, output_zero_point, *, out=None,
                                      **keywords):
    """ELEMENT_WISE_QUANTIZED_LINEAR_ADD on dask arrays; see
    :func:`qops.element_wise_quantized_linear_add`.  A and B may be chunked
    in any way; the output takes A's chunks where A has the output's size,
    else B's, and the other operand is rechunked to match (an axis of size
    1 is broadcast whole)."""
    function = "element_wise_quantized_linear_add"
    _no_out(function, out)
    slots = dict(a=a, a_scale=a_scale, a_zero_point=a_zero_point, b=b, b_scale=b_scale,
                 b_zero_point=b_zero_point, output_scale=output_scale,
                 output_zero_point=output_zero_point)
    output_shape, dtype = _validate(function, slots, keywords)
    operands = {k: (v if isinstance(v, da.Array) else da.from_array(np.asarray(v)))
                for k, v in (("a", a), ("b", b))}
    chunks = []
    for d, size in enumerate(output_shape):
        source = next((v for v in operands.values() if v.shape[d] == size), None)
        chunks.append(source.chunks[d] if source is not None else (size,))
    for k, v in operands.items():
        operands[k] = v.rechunk(tuple(c if v.shape[d] == output_shape[d] and v.shape[d] != 1
                                      else -1 for d, c in enumerate(chunks)))
    parameters = {k: _whole(_constant(slots[k])) for k in slots if k not in ("a", "b")}
    names = ("a", "b") + tuple(parameters)
    tasks = {}
    numblocks = tuple(len(c) for c in chunks)
    for index in np.ndindex(*numblocks):
        keys = [(v.name,) + tuple(i if v.numblocks[d] > 1 else 0 for d, i in enumerate(index))
                for v in operands.values()]
        chunk = _Chunk(function, names, (None,) * len(names), keywords)
        tasks[index] = (chunk, *keys, *(_operand(v) for v in parameters.values()))
    token = tokenize(function, [v.name for v in operands.values()],
                     [getattr(v, "name", v) for v in parameters.values()], repr(keywords))
    return _array("add", token, tasks, tuple(chunks), dtype,
                  [*operands.values(), *parameters.values()])


# -- convolutions and pooling -------------------------------------------------------------

def _batch_only(operator, slot, value, axes, reason):
    """Refuse a dask operand chunked along ``axes``."""
    if isinstance(value, da.Array):
        for d in axes:
            if value.numblocks[d] > 1:
                _refuse(operator, slot, f"is chunked along axis {d} ({value.chunks[d]}); "
                        f"{reason}: rechunk it to one chunk there "
                        f"(x.rechunk({{{d}: -1}}))")


def _convolution(function, slots, keywords):
    out = keywords.pop("out", None)
    _no_out(function, out)
    output_shape, dtype = _validate(function, slots, keywords)
    image, filter = slots["input"], slots["filter"]
    rank = len(output_shape)
    _batch_only(function, "input", image, range(1, rank),
                "a convolution's tasks take whole images (channels and every spatial axis)")
    _batch_only(function, "filter", filter, range(1, rank),
                "a filter is cut along its output channels only")
    group_count = keywords.get("group_count") or 1
    if isinstance(filter, da.Array) and filter.numblocks[0] > 1 and group_count != 1:
        _refuse(function, "filter", f"is chunked along its output channels with "
                f"group_count={group_count}; only a one-group filter may be: rechunk it to "
                "one chunk (filter.rechunk(-1))")
    image = image if isinstance(image, da.Array) else da.from_array(np.asarray(image))
    filter = _constant(filter)
    out_channels = output_shape[1]
    filter_chunks = filter.chunks[0]
    # Per output channel parameters follow the filter's chunks.  Their
    # sizes come from their shapes (dask does not implement np.size).
    channel_slots = [k for k in ("filter_scale", "filter_zero_point", "bias")
                     if k in slots and slots[k] is not None
                     and math.prod(np.shape(slots[k])) == out_channels
                     and out_channels > 1]
    parameters = {k: _whole(_constant(v)) for k, v in slots.items()
                  if k not in ("input", "filter")}
    names = ("input", "filter") + tuple(parameters)
    tasks = {}
    for b in range(image.numblocks[0]):
        for o, (start, stop) in enumerate(_starts(filter_chunks)):
            cuts = [None, None]
            for k in parameters:
                if k in channel_slots:
                    shape = np.shape(slots[k])
                    cuts.append(tuple(slice(start, stop) if size == out_channels else slice(None)
                                      for size in shape))
                else:
                    cuts.append(None)
            chunk = _Chunk(function, names, tuple(cuts), keywords)
            index = (b, o) + (0,) * (rank - 2)
            tasks[index] = (chunk, (image.name, b) + (0,) * (rank - 1),
                            (filter.name, o) + (0,) * (filter.ndim - 1),
                            *(_operand(v) for v in parameters.values()))
    chunks = (image.chunks[0], filter_chunks) + tuple((size,) for size in output_shape[2:])
    token = tokenize(function, image.name, filter.name,
                     [getattr(v, "name", v) for v in parameters.values()], repr(keywords))
    return _array(function, token, tasks, chunks, dtype, [image, filter, *parameters.values()])


def quantized_linear_convolution(input, input_scale, input_zero_point, filter, filter_scale,
                                 filter_zero_point=None, bias=None, output_scale=None,
                                 output_zero_point=None, **keywords):
    """QUANTIZED_LINEAR_CONVOLUTION on dask arrays; see
    :func:`qops.quantized_linear_convolution`.  The input may be chunked
    along its batch axis, the filter (one group) along its output channels."""
    return _convolution("quantized_linear_convolution", dict(
        input=input, input_scale=input_scale, input_zero_point=input_zero_point,
        filter=filter, filter_scale=filter_scale, filter_zero_point=filter_zero_point,
        bias=bias, output_scale=output_scale, output_zero_point=output_zero_point), keywords)


def convolution_integer(input, input_zero_point=None, filter=None, filter_zero_point=None,
                        **keywords):
    """CONVOLUTION_INTEGER on dask arrays; see :func:`qops.convolution_integer`."""
    return _convolution("convolution_integer", dict(
        input=input, input_zero_point=input_zero_point, filter=filter,
        filter_zero_point=filter_zero_point), keywords)


def quantized_linear_average_pooling(input, input_scale, input_zero_point, output_scale,
                                     output_zero_point, *, out=None, **keywords):
    """QUANTIZED_LINEAR_AVERAGE_POOLING on dask arrays; see
    :func:`qops.quantized_linear_average_pooling`.  The input may be chunked
    along its batch and channel axes."""
    function = "quantized_linear_average_pooling"
    _no_out(function, out)
    slots = dict(input=input, input_scale=input_scale, input_zero_point=input_zero_point,
                 output_scale=output_scale, output_zero_point=output_zero_point)
    output_shape, dtype = _validate(function, slots, keywords)
    rank = len(output_shape)
    _batch_only(function, "input", input, range(2, rank),
                "a pooling task takes whole planes (every spatial axis)")
    image = input if isinstance(input, da.Array) else da.from_array(np.asarray(input))
    parameters = {k: _whole(_constant(v)) for k, v in slots.items() if k != "input"}
    names = ("input",) + tuple(parameters)
    tasks = {}
    for b in range(image.numblocks[0]):
        for c in range(image.numblocks[1]):
            chunk = _Chunk(function, names, (None,) * len(names), keywords)
            tasks[(b, c) + (0,) * (rank - 2)] = (
                chunk, (image.name, b, c) + (0,) * (rank - 2),
                *(_operand(v) for v in parameters.values()))
    chunks = image.chunks[:2] + tuple((size,) for size in output_shape[2:])
    token = tokenize(function, image.name, [getattr(v, "name", v) for v in parameters.values()],
                     repr(keywords))
    return _array("pooling", token, tasks, chunks, dtype, [image, *parameters.values()])


# -- matrix multiplies ---------------------------------------------------------------------

def _matmul(function, slots, keywords, *, a_slots):
    """A product chunked over A's batch axes and rows: one task per chunk of
    A, with B whole (cut to the chunk's batch entries where B has them)."""
    out = keywords.pop("out", None)
    _no_out(function, out)
    output_shape, dtype = _validate(function, slots, keywords)
    a = slots["a"]
    a = a if isinstance(a, da.Array) else da.from_array(np.asarray(a))
    if a.numblocks[-1] > 1:
        a = a.rechunk({a.ndim - 1: -1})  # a task sums over all of K
    rank = len(output_shape)
    batch_rank = rank - 2
    # A's axes, right-aligned with the output's.
    a_offset = rank - a.ndim
    spans = [_starts(c) for c in a.chunks]

    def cut(shape, row_axis):
        """Per axis of an operand (right-aligned): the chunk's batch entries
        where the operand has them, its rows where row_axis, else whole."""
        offset = rank - len(shape)
        def make(index):
            parts = []
            for j, size in enumerate(shape):
                d = offset + j                   # output axis
                ad = d - a_offset                # A's axis
                takes = (d < batch_rank and size > 1 and 0 <= ad < a.ndim
                         and a.shape[ad] == size) or (row_axis and d == rank - 2 and size > 1)
                if takes:
                    start, stop = spans[ad][index[ad]]
                    parts.append(slice(start, stop))
                else:
                    parts.append(slice(None))
            return tuple(parts)
        return make

    parameters = {k: _whole(_constant(v)) for k, v in slots.items() if k != "a"}
    makers = {k: cut(np.shape(slots[k]), k in a_slots) for k in parameters
              if slots[k] is not None}
    names = ("a",) + tuple(parameters)
    tasks = {}
    for index in np.ndindex(*a.numblocks):
        cuts = [None] + [makers[k](index) if k in makers else None for k in parameters]
        chunk = _Chunk(function, names, tuple(cuts), keywords)
        out_index = (0,) * (rank - a.ndim) + index[:-1] + (0,)
        tasks[out_index] = (chunk, (a.name,) + index,
                            *(_operand(v) for v in parameters.values()))
    chunks = []
    for d, size in enumerate(output_shape[:-1]):
        ad = d - a_offset
        chunks.append(a.chunks[ad] if 0 <= ad and a.shape[ad] == size else (size,))
    chunks.append((output_shape[-1],))
    token = tokenize(function, a.name, [getattr(v, "name", v) for v in parameters.values()],
                     repr(keywords))
    return _array("matmul", token, tasks, tuple(chunks), dtype, [a, *parameters.values()])


def quantized_linear_matrix_multiply(a, a_scale, a_zero_point, b, b_scale, b_zero_point=None,
                                     output_scale=None, output_zero_point=None, **keywords):
    """QUANTIZED_LINEAR_MATRIX_MULTIPLY on dask arrays; see
    :func:`qops.quantized_linear_matrix_multiply`.  A may be chunked along its
    batch axes and rows; its columns and B are whole in every task."""
    slots = dict(a=a, a_scale=a_scale, a_zero_point=a_zero_point, b=b, b_scale=b_scale,
                 b_zero_point=b_zero_point, output_scale=output_scale,
                 output_zero_point=output_zero_point)
    return _matmul("quantized_linear_matrix_multiply", slots, keywords,
                   a_slots=("a_scale", "a_zero_point"))


def matrix_multiply_integer(a, a_zero_point=None, b=None, b_zero_point=None, **keywords):
    """MATRIX_MULTIPLY_INTEGER on dask arrays; see :func:`qops.matrix_multiply_integer`."""
    slots = dict(a=a, a_zero_point=a_zero_point, b=b, b_zero_point=b_zero_point)
    return _matmul("matrix_multiply_integer", slots, keywords, a_slots=("a_zero_point",))


def matrix_multiply_integer_to_float(a, a_scale, a_zero_point, b, b_scale, b_zero_point=None,
                                     bias=None, **keywords):
    """MATRIX_MULTIPLY_INTEGER_TO_FLOAT on dask arrays; see
    :func:`qops.matrix_multiply_integer_to_float`."""
    slots = dict(a=a, a_scale=a_scale, a_zero_point=a_zero_point, b=b, b_scale=b_scale,
                 b_zero_point=b_zero_point, bias=bias)
    return _matmul("matrix_multiply_integer_to_float", slots, keywords,
                   a_slots=("a_scale", "a_zero_point"))


# -- compiled operators ---------------------------------------------------------------------

class DaskCompiledOperator:
    """A :class:`qops.CompiledOperator` applied to dask arrays.

    The compiled operator enters each graph as one key: a distributed
    scheduler sends it to a worker once (it pickles as its constants and
    attributes, and packs them again on arrival), and every task on that
    worker shares it.  Call it as the compiled operator, with dask or NumPy
    arrays; the result is a dask array.
    """

    def __init__(self, compiled):
        self.compiled = compiled
        self._key = dask.delayed(compiled, pure=True)

    def __repr__(self):
        return f"<dask {self.compiled!r}>"

    def validate_shapes(self, slots):
        """The output shape and dtype of a call with these slots (dask
        arrays as their descriptions), validated as the compiled operator
        validates a call."""
        constants = self.compiled.constants
        every = {k: _describe(v) for k, v in slots.items() if k != _COMPILED}
        validated = qops.validate(self.compiled.operator.name,
                                  feature_level=self.compiled.feature_level,
                                  **every, **constants, **self.compiled.attributes)
        return tuple(validated.output_shape), _dtype(validated.output_dtype)

    def __call__(self, *args, out=None, n_threads=None, **slots):
        operator = self.compiled.operator.name
        _no_out(operator, out)
        slots.update(zip(self.compiled.runtime_slots, args))
        unknown = set(slots) - set(self.compiled.runtime_slots)
        if unknown:
            _refuse(operator, sorted(unknown)[0], "is bound at compile time or is not a slot; "
                    f"the call takes {', '.join(self.compiled.runtime_slots)}")
        slots = {name: slots.get(name) for name in self.compiled.runtime_slots}
        kind = "matmul" if operator == "QUANTIZED_LINEAR_MATRIX_MULTIPLY" else "convolution"
        return _compiled_map(self, slots, _keywords(n_threads=n_threads), kind=kind)


def _compiled_map(owner, runtime, keywords, *, kind):
    """One task per chunk of the runtime operand (A, or the input image along
    its batch), each calling the compiled operator, which is one key."""
    operator = owner.compiled.operator.name
    output_shape, dtype = owner.validate_shapes(runtime)
    first = "a" if kind == "matmul" else "input"
    x = runtime[first]
    x = x if isinstance(x, da.Array) else da.from_array(np.asarray(x))
    if kind == "matmul":
        if x.numblocks[-1] > 1:
            x = x.rechunk({x.ndim - 1: -1})
    else:
        _batch_only(operator, "input", x, range(1, x.ndim),
                    "a convolution's tasks take whole images (channels and every spatial axis)")
    spans = [_starts(c) for c in x.chunks]
    parameters = {k: _whole(_constant(v)) for k, v in runtime.items() if k != first}
    names = (first, _COMPILED) + tuple(parameters)
    compiled_key = owner._key
    rank = len(output_shape)
    tasks = {}
    for index in np.ndindex(*x.numblocks):
        cuts = [None, None]
        for k in parameters:
            shape = np.shape(runtime[k])
            if kind == "matmul" and runtime[k] is not None and len(shape) >= 2:
                # A's parameters: per row of A (and per batch entry), cut with A.
                offset = x.ndim - len(shape)
                cuts.append(tuple(slice(*spans[offset + j][index[offset + j]])
                                  if size > 1 and size == x.shape[offset + j] else slice(None)
                                  for j, size in enumerate(shape)))
            else:
                cuts.append(None)
        chunk = _Chunk(_COMPILED, names, tuple(cuts), keywords)
        if kind == "matmul":
            out_index = (0,) * (rank - x.ndim) + index[:-1] + (0,)
        else:
            out_index = (index[0],) + (0,) * (rank - 1)
        tasks[out_index] = (chunk, (x.name,) + index, compiled_key.key,
                            *(_operand(v) for v in parameters.values()))
    if kind == "matmul":
        chunks = tuple((x.chunks[d - (rank - x.ndim)] if d >= rank - x.ndim
                        and x.shape[d - (rank - x.ndim)] == size else (size,))
                       for d, size in enumerate(output_shape[:-1])) + ((output_shape[-1],),)
    else:
        chunks = (x.chunks[0],) + tuple((size,) for size in output_shape[1:])
    token = tokenize(operator, x.name, compiled_key.key,
                     [getattr(v, "name", v) for v in parameters.values()], repr(keywords))
    name = f"qops-compiled-{token}"
    graph = {(name,) + index: task for index, task in tasks.items()}
    dependencies = [x, compiled_key] + [v for v in parameters.values()
                                         if isinstance(v, da.Array)]
    layer = HighLevelGraph.from_collections(name, graph, dependencies=dependencies)
    return da.Array(layer, name, chunks, dtype=dtype, meta=np.empty((0,) * len(chunks), dtype))


def compile(name, *, feature_level=None, **constants_and_attributes):
    """:func:`qops.compile` for dask arrays: bind the constants once.

    Returns
    -------
    DaskCompiledOperator
        Call it with dask (or NumPy) arrays for the remaining slots.
    """
    compiled = qops.compile(name, feature_level=feature_level, **constants_and_attributes)
    if compiled.operator.name not in ("QUANTIZED_LINEAR_CONVOLUTION",
                                      "QUANTIZED_LINEAR_MATRIX_MULTIPLY"):
        raise qops.UnsupportedError(
            f"{compiled.operator.name}: qops.dask.compile takes the convolution and the matrix "
            "multiply; call this operator's qops.dask function with its constants instead",
            operator=compiled.operator.name, given=name)
    return DaskCompiledOperator(compiled)
