"""Channels-last tensors between a session's convolutions.

ONNX lays images out channels-first (N, C, H, W).  The convolution kernels
multiply pixels (rows of channels) by the packed filter, so a channels-first
image is first copied channels-last, and the product's rows are stored
transposed into the channels-first output.  Between two convolutions both
steps are waste: a session keeps such tensors channels-last, as
(N, H, W, C) arrays, where every step that writes or reads them takes that
layout, and the values stay bit for bit what they were.

A step says what it takes through its call's ``layouts`` attribute:

- :class:`ConvolutionLayouts`: a convolution whose image and output may
  each be either layout (``make`` gives its call in the layouts asked), as
  far as its ``reads`` and ``writes`` flags (and a ``takes`` rule) allow;
- :class:`ElementwiseLayouts`: an elementwise step (the quantized add) that
  takes operands of one shape in any layout, the same for all, and writes
  its output in it;
- :class:`FollowingLayouts`: a step whose output takes its operand's
  layout (a max pooling);
- :class:`ReaderLayouts`: a step that reads its operand in either layout and
  writes its output as the model says (a global pooling).

Tensors joined by elementwise or following steps take one layout together
(a residual stream, a pooled image); such a set goes channels-last when
every tensor of it is written by a step with layouts that writes that layout
and read only by steps with layouts that read it, and none is a graph
output, a graph input or a constant.  Anything else (a node without layouts,
a depthwise convolution of a large image or of one whose size the session
does not know, an output) reads channels-first, so the convolution that
feeds it writes channels-first, and the one that reads a channels-first
tensor copies it channels-last itself.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

__all__ = ["ConvolutionLayouts", "ElementwiseLayouts", "FollowingLayouts", "ReaderLayouts",
           "channels_last", "following"]

#: (N, C, H, W) -> (N, H, W, C) and back.
TO_CHANNELS_LAST = (0, 2, 3, 1)
TO_CHANNELS_FIRST = (0, 3, 1, 2)


@dataclasses.dataclass(frozen=True)
class ConvolutionLayouts:
    """A convolution step that runs on either layout: ``make(input_channels_last,
    output_channels_last)`` is its call then; its image is input ``data``.
    ``takes(image_shape)``, when given, says whether it takes channels-last
    tensors for an image of that (channels-first) shape at all (a depthwise
    convolution's kernel takes small images); it is asked only where the
    session knows the image's shape."""

    make: Callable
    data: int = 0
    takes: Callable = None
    #: Whether it reads (writes) channels-last tensors at all.
    reads: bool = True
    writes: bool = True


@dataclasses.dataclass(frozen=True)
class ReaderLayouts:
    """A step that reads its operand (input ``data``) in either layout and
    writes its output as the model lays it out: ``make()`` is its call on a
    channels-last operand (a global pooling, whose output has no pixels)."""

    make: Callable
    data: int = 0


@dataclasses.dataclass(frozen=True)
class FollowingLayouts:
    """A step whose output takes its operand's layout (input ``data``):
    ``make()`` is its call on a channels-last operand (a max pooling)."""

    make: Callable
    data: int = 0


def following(runner):
    """A node's FollowingLayouts where its runner (``run(arguments)``) has a
    ``channels_last`` form, else None."""
    channels_last = getattr(runner, "channels_last", None)
    if channels_last is None:
        return None

    def make():
        def call(arguments, n_threads):
            return channels_last(arguments)
        return call

    return FollowingLayouts(make)


@dataclasses.dataclass(frozen=True)
class ElementwiseLayouts:
    """An elementwise step whose operands (inputs ``data``) of one shape may
    be in any layout, the same for all, its output then in that layout."""

    data: tuple


def channels_last(steps, graph_inputs, graph_outputs, constants, shapes=None):
    """``steps`` with the tensors between convolutions kept channels-last
    (see the module's notes): the steps that write or read them get calls in
    that layout, every other step is as it was.  ``shapes``: the tensors'
    shapes, where the session knows them (a convolution with a ``takes``
    rule takes part only where its image's is known)."""
    shapes = shapes or {}
    steps = [_without_layouts(step) if not _able(step, shapes) else step for step in steps]
    produced_by = {}
    read_by = {}
    for index, step in enumerate(steps):
        for name in step.outputs:
            if name:
                produced_by[name] = index
        for position, name in enumerate(step.inputs):
            if name:
                read_by.setdefault(name, []).append((index, position))
    # Tensors an elementwise or following step joins take one layout: a union-find.
    parent = {}

    def root(name):
        parent.setdefault(name, name)
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    for step in steps:
        layouts = getattr(step.call, "layouts", None)
        if isinstance(layouts, (ElementwiseLayouts, FollowingLayouts)) and len(step.outputs) == 1:
            data = layouts.data if isinstance(layouts, ElementwiseLayouts) else (layouts.data,)
            joined = [step.inputs[position] for position in data] + [step.outputs[0]]
            for name in joined:
                parent[root(name)] = root(joined[0])
    members = {}
    for index, step in enumerate(steps):
        if isinstance(getattr(step.call, "layouts", None), ConvolutionLayouts) and (
                len(step.outputs) == 1):
            members.setdefault(root(step.outputs[0]), set()).add(step.outputs[0])
    for name in parent:
        members.setdefault(root(name), set()).add(name)
    kept = set()
    for names in members.values():
        if all(_takes(name, steps, produced_by, read_by, graph_inputs, graph_outputs, constants)
               for name in names):
            kept |= names
    if not kept:
        return list(steps)
    return [_in_layouts(step, kept) for step in steps]


def _able(step, shapes):
    """Whether a step with layouts takes them here (a convolution with a
    ``takes`` rule: for its image's known shape)."""
    layouts = getattr(step.call, "layouts", None)
    if not isinstance(layouts, ConvolutionLayouts) or layouts.takes is None:
        return True
    shape = shapes.get(step.inputs[layouts.data])
    return shape is not None and len(shape) == 4 and bool(layouts.takes(shape))


def _without_layouts(step):
    def call(arguments, n_threads, run=step.call):
        return run(arguments, n_threads)
    compiled = getattr(step.call, "compiled", None)
    if compiled is not None:
        call.compiled = compiled
    return dataclasses.replace(step, call=call)


def _takes(name, steps, produced_by, read_by, graph_inputs, graph_outputs, constants):
    """Whether tensor ``name`` may be channels-last: written by a step that
    writes that layout, read only where steps read it as their operands."""
    if name in graph_outputs or name in graph_inputs or name in constants:
        return False
    writer = produced_by.get(name)
    if writer is None or len(steps[writer].outputs) != 1:
        return False
    layouts = getattr(steps[writer].call, "layouts", None)
    if not (isinstance(layouts, (ElementwiseLayouts, FollowingLayouts))
            or isinstance(layouts, ConvolutionLayouts) and layouts.writes):
        return False
    for index, position in read_by.get(name, ()):
        layouts = getattr(steps[index].call, "layouts", None)
        if len(steps[index].outputs) != 1:
            return False
        if isinstance(layouts, ConvolutionLayouts) and not layouts.reads:
            return False
        if isinstance(layouts, (ConvolutionLayouts, ReaderLayouts, FollowingLayouts)):
            if position != layouts.data or steps[index].inputs.count(name) != 1:
                return False
        elif not (isinstance(layouts, ElementwiseLayouts) and position in layouts.data):
            return False
    return True


def _in_layouts(step, kept):
    layouts = getattr(step.call, "layouts", None)
    if isinstance(layouts, ConvolutionLayouts) and len(step.outputs) == 1:
        input_channels_last = step.inputs[layouts.data] in kept
        output_channels_last = step.outputs[0] in kept
        if input_channels_last or output_channels_last:
            return dataclasses.replace(
                step, call=layouts.make(input_channels_last, output_channels_last),
                channels_last=(input_channels_last, output_channels_last))
    elif isinstance(layouts, FollowingLayouts) and step.outputs[0] in kept:
        return dataclasses.replace(step, call=layouts.make(), channels_last=(True, True))
    elif isinstance(layouts, ReaderLayouts) and step.inputs[layouts.data] in kept:
        return dataclasses.replace(step, call=layouts.make(), channels_last=(True, False))
    elif isinstance(layouts, ElementwiseLayouts) and step.outputs[0] in kept:
        return dataclasses.replace(step, call=_elementwise(step.call, layouts.data),
                                   channels_last=(True, True))
    return step


def _elementwise(call, data):
    """The elementwise ``call`` on channels-last operands: as they are when
    they are arrays of one shape; else (broadcasting) on their channels-first
    views, its output then made channels-last."""
    def run(arguments, n_threads):
        operands = [arguments[position] for position in data]
        first = operands[0]
        if all(type(operand) is np.ndarray and operand.shape == first.shape
               for operand in operands):
            return call(arguments, n_threads)
        arguments = list(arguments)
        for position in data:
            arguments[position] = np.asarray(arguments[position]).transpose(TO_CHANNELS_FIRST)
        return [np.ascontiguousarray(np.asarray(value).transpose(TO_CHANNELS_LAST))
                for value in call(arguments, n_threads)]

    return run
