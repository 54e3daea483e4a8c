"""MatMulNBits (onnxruntime's ``com.microsoft`` contrib operator): the public
function, its validation and its plans."""

from __future__ import annotations

import numpy as np

from qops import registry
from qops.backends.contract import Call
from qops.ops import arguments as _args
from qops.ops.plans import PlanCache
from qops.ops.validation import (
    Desc,
    check_attributes,
    check_tensors,
    fail,
    resolve_version,
    shape_text,
)
from qops.registry import dtypes as _dtypes
from qops.registry.contrib import MIN_BLOCK_SIZE
from qops.threads import resolve_threads

__all__ = ["matmul_n_bits", "prepare", "check_values", "PLANS", "VALUE_SLOTS", "blocks_of"]

OPERATOR = registry.get("MatMulNBits")
SLOTS = tuple(slot.name for slot in OPERATOR.inputs)


def matmul_n_bits(a=None, b=None, scales=None, zero_points=None, g_idx=None, bias=None, *,
                  k=None, n=None, bits=4, block_size=None, accuracy_level=0, weight_prepacked=0,
                  out=None, n_threads=None):
    """onnxruntime's ``MatMulNBits``: ``a @ dequantized(b) + bias``.

    Parameters
    ----------
    a : ndarray of float32, float16 or bfloat16, shape (..., K)
    b : ndarray of uint8, shape (N, k_blocks, blob_size)
        The weights, K x N, quantized in blocks of ``block_size`` along K
        (``k_blocks = ceil(K / block_size)``): column n's block j is the blob
        ``b[n, j]`` of ``block_size * bits / 8`` bytes, values low bits
        first.  Any of its dimensions 0 (the others as stated) leaves the
        projection out: the result is zeros, plus the bias.
    scales : ndarray of a's type, shape (N, k_blocks) or (N * k_blocks,)
    zero_points : ndarray, optional
        uint8 packed as B is, ``(N, ceil(k_blocks * bits / 8))``, or float,
        ``(N, k_blocks)`` (either also flattened).  The schema's float zero
        point has a's type; any of float32, float16 and bfloat16 is taken
        here, each exact in float32.  Absent: ``2**(bits - 1)``.
    g_idx : ndarray of int32, shape (K,), optional
        Deprecated in the schema; only ``k // block_size`` (the blocks in
        order) is accepted.
    bias : ndarray of a's type, shape (N,), optional
    k, n : int
        The weight matrix's rows (A's last dimension) and columns; required.
    bits : {2, 4, 8}
    block_size : int
        A power of two, at least 16; required.
    accuracy_level : int, 0 to 4
        The least accuracy A may be computed in.  Levels 0 to 3 take the
        float32 rule below; level 4 quantizes A to int8 per block and sums
        each block exactly (:mod:`qops.reference` states it), where the zero
        points are integers, blocks at most 4096 and A finite, else it too
        takes the float32 rule.
    weight_prepacked : 0
        Prepacked layouts belong to CUDA; only 0 is accepted.
    out : ndarray, optional
        Written and returned: C-contiguous, shape ``a.shape[:-1] + (N,)``,
        a's type.
    n_threads : int, optional

    Returns
    -------
    ndarray of a's type, shape ``a.shape[:-1] + (N,)``
        Each weight dequantized as ``(q - zero_point) * scale`` in float32;
        each output the float32 chain ``s = fma(a[k], w[k], s)`` over k
        ascending from 0, plus the bias, rounded once to a's type
        (:func:`qops.reference.matmul_n_bits`): the same bits on every CPU
        and at any thread count.

    Examples
    --------
    >>> import numpy as np
    >>> a = np.array([[1.0, 2.0] + [0.0] * 14], np.float32)
    >>> # 16 four-bit weights per column, 9 and 10 first: (9 - 8, 10 - 8) * 0.5
    >>> b = np.array([[[0xA9] + [0x88] * 7]], np.uint8)
    >>> matmul_n_bits(a, b, np.array([[0.5]], np.float32), k=16, n=1, block_size=16)
    array([[2.5]], dtype=float32)
    """
    slots = dict(a=a, b=b, scales=scales, zero_points=zero_points, g_idx=g_idx, bias=bias)
    attributes = dict(k=k, n=n, bits=bits, block_size=block_size,
                      accuracy_level=accuracy_level, weight_prepacked=weight_prepacked)
    return PLANS.run(slots, attributes, None, out=out, n_threads=resolve_threads(n_threads))


def blocks_of(k, block_size):
    """k_blocks: the blocks along K."""
    return -(-k // block_size)


def _check_shape_attributes(op, attributes):
    for name in ("k", "n", "block_size"):
        if attributes[name] is None:
            fail(op, f"{name} is required ({op.attribute(name).source_name})", slot=name)
    block_size = attributes["block_size"]
    if block_size & (block_size - 1):
        fail(op, f"block_size is {block_size}; it must be a power of two, at least "
                 f"{MIN_BLOCK_SIZE}", slot="block_size", given=block_size)


def _parameter_shape(op, name, desc, n, count, what, empty=False):
    """A per-block parameter: (n, count) or (n * count,); beside an empty B
    (the projection left out), either with dimensions 0 as well."""
    shape = tuple(desc.shape)
    allowed = ((n, count), (n * count,))
    if empty and 0 in shape and any(len(shape) == len(form) and all(
            size in (0, want) for size, want in zip(shape, form)) for form in allowed):
        return
    if shape not in allowed:
        fail(op, f"{name} has shape {shape_text(desc.shape)}; with N = {n} and {what} it "
                 f"must be {shape_text((n, count))} or {shape_text((n * count,))}"
                 + (" (or either with dimensions 0, beside an empty b)" if empty else ""),
             slot=name, given=shape, allowed=allowed)


def prepare(slots: dict, attributes: dict, opset=None, *, out=None) -> Call:
    """Normalize and validate a MatMulNBits call; raise before anything runs."""
    op = OPERATOR
    version = resolve_version(op, opset=opset)
    attributes = check_attributes(op, version, attributes)
    _check_shape_attributes(op, attributes)
    k, n, bits, block_size = (attributes[name] for name in ("k", "n", "bits", "block_size"))
    given = {name: _args.as_tensor(op, name, slots.get(name)) for name in SLOTS}
    for name in ("a", "b", "scales"):
        if given[name] is None:
            fail(op, f"{name} is required ({op.slot(name).source_name})", slot=name)
    descs = {name: (item.desc if item is not None else None) for name, item in given.items()}
    a_desc = descs["a"]
    output_shape = tuple(a_desc.shape[:-1]) + (n,)
    descs["y"] = Desc(dtype=a_desc.dtype, dtype_text=a_desc.dtype_text, shape=output_shape)
    check_tensors(op, version, descs)

    if a_desc.shape[-1] != k:
        fail(op, f"a has shape {shape_text(a_desc.shape)}; its last dimension must be K = {k}",
             slot="a", given=tuple(a_desc.shape), allowed=k)
    k_blocks = blocks_of(k, block_size)
    blob_size = block_size * bits // 8
    packed = (n, k_blocks, blob_size)
    b_shape = tuple(descs["b"].shape)
    empty = 0 in b_shape
    if (empty and any(size not in (0, want) for size, want in zip(b_shape, packed))) or (
            not empty and b_shape != packed):
        fail(op, f"b has shape {shape_text(b_shape)}; with N = {n}, K = {k}, block_size = "
                 f"{block_size} and {bits} bits it must be {shape_text(packed)} (N, k_blocks, "
                 f"blob_size), or that with dimensions 0 to leave the projection out",
             slot="b", given=b_shape, allowed=packed)
    _parameter_shape(op, "scales", descs["scales"], n, k_blocks, f"{k_blocks} blocks", empty)
    zero_desc = descs["zero_points"]
    if zero_desc is not None:
        if zero_desc.dtype == "UINT8":
            packed_count = -(-k_blocks * bits // 8)
            _parameter_shape(op, "zero_points", zero_desc, n, packed_count,
                             f"{k_blocks} blocks packed {8 // bits} to a byte", empty)
        else:  # a float type: the schema's is A's; any converts to float32 exactly
            _parameter_shape(op, "zero_points", zero_desc, n, k_blocks, f"{k_blocks} blocks",
                             empty)
    if not empty:
        if descs["g_idx"] is not None and tuple(descs["g_idx"].shape) != (k,):
            fail(op, f"g_idx has shape {shape_text(descs['g_idx'].shape)}; it must be "
                     f"{shape_text((k,))}", slot="g_idx", given=tuple(descs["g_idx"].shape))
    if descs["bias"] is not None and tuple(descs["bias"].shape) != (n,):
        fail(op, f"bias has shape {shape_text(descs['bias'].shape)}; it must be "
                 f"{shape_text((n,))}", slot="bias", given=tuple(descs["bias"].shape),
             allowed=(n,))

    arrays, complete = _args.arrays_of(given)
    output_dtype = _dtypes.to_numpy(a_desc.dtype)
    # qops.validate and compile may mix descriptions and data: check what has data.
    check_finite(op, arrays, empty)
    check_g_idx(op, arrays, k, block_size, empty)
    if complete:
        _args.check_out(op, out, output_shape, output_dtype, arrays)
    else:
        arrays = None
    return Call(operator=op, version=version, arrays=arrays,
                attributes=dict(attributes, empty=empty), output_shape=output_shape,
                output_dtype=output_dtype)


def check_g_idx(op, arrays, k, block_size, empty):
    """g_idx, when given, must put each k in its own block in order."""
    g_idx = arrays.get("g_idx")
    if g_idx is None or empty:
        return
    trivial = np.arange(k, dtype=np.int64) // block_size
    wrong = np.flatnonzero(np.asarray(g_idx, np.int64) != trivial)
    if wrong.size:
        first = int(wrong[0])
        fail(op, f"g_idx[{first}] is {int(g_idx[first])}; only the blocks in order "
                 f"(g_idx[k] = k // block_size = {int(trivial[first])}) are supported, as the "
                 f"schema deprecates g_idx", slot="g_idx", given=int(g_idx[first]))


def check_finite(op, arrays, empty):
    """Scales and float zero points must be finite (zero and negative scales
    are the quantizer's business); NaN would pass through every output."""
    if empty:
        return
    for name in ("scales", "zero_points"):
        values = arrays.get(name)
        if values is None or values.dtype == np.uint8:
            continue
        wide = np.asarray(values, np.float32)
        if not np.isfinite(wide).all():
            first = float(wide[~np.isfinite(wide)].flat[0])
            fail(op, f"{name} has {'a NaN' if first != first else 'an infinite'} value; "
                     f"{name} must be finite", slot=name, given=first)


def check_values(template, arrays):
    """A planned call's value checks: finite scales and zero points, g_idx's order."""
    attributes = template.attributes
    check_finite(template.operator, arrays, attributes["empty"])
    check_g_idx(template.operator, arrays, attributes["k"], attributes["block_size"],
                attributes["empty"])


#: The slots whose values the value checks read.
VALUE_SLOTS = ("scales", "zero_points", "g_idx")
#: Validated signatures of the function.
PLANS = PlanCache(prepare, check_values, VALUE_SLOTS)
