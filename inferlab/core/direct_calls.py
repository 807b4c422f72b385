"""Compiled graphs called straight, without torch.compile's entry and dynamo's guards, once the
engine has seen a call of the same layout go through them.

A compiled call pays, before inductor's generated graph runs, for torch.compile's entry wrapper
(Python that saves and restores dispatch and frame state) and dynamo's guard lookup (every guard of
the frame: each argument tensor's metadata, the model's attributes, global state). For a small
model's step that is a large share of the call (measured in docs/engines.md).

So the engine compiles through `GraphCapture`, a backend that hands the graph to inductor with the
engine's options and keeps what inductor returns, and notes which tensors dynamo passed it. Right
after that first call, `DirectCall.from_capture` maps each of the graph's inputs to one of the
call's argument tensors and each tensor the call returned to one of the graph's outputs, by
identity. A later call calls the graph itself when it has the same models (by identity), the same
layout of everything that is not a tensor (`split_arguments`: the nesting of lists and tuples, each
value with its type, which dynamo specializes on), tensors that pass the graph's `TensorGuards`
(dynamo's own C++ check of shape, stride, dtype, device and grad, about 1 us for ten tensors), and
no tensor passed twice. The models' weights are frozen into the graphs, and the engine refuses
weights changed since on every call (CompiledEngine._check_weights). A call the engine cannot map
(a graph input that is no argument, such as a weight that is not frozen; a result that is no graph
output) keeps going through dynamo, as does any call that fails these checks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch._C._dynamo.guards import TensorGuards


def flatten_arguments(value, leaves: list, nesting: list) -> None:
    """The leaves of nested lists and tuples into `leaves`, and their types and lengths into `nesting`."""
    if isinstance(value, (list, tuple)):
        nesting.append((type(value), len(value)))
        for item in value:
            flatten_arguments(item, leaves, nesting)
    else:
        leaves.append(value)


def split_arguments(args: tuple) -> tuple[list[torch.Tensor], tuple]:
    """(the arguments' tensors, in order; the layout of everything else): the nesting, and each
    leaf's type and value, or None where it is a tensor. Calls of one layout whose tensors pass
    one graph's TensorGuards are calls dynamo's guards would treat alike."""
    leaves, nesting = [], []
    flatten_arguments(args, leaves, nesting)
    tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
    values = tuple(None if isinstance(leaf, torch.Tensor) else (type(leaf), leaf) for leaf in leaves)
    return tensors, (tuple(nesting), values)


class CapturedGraph:
    """What inductor compiled for one dynamo frame, which dynamo calls in its place; keeps the
    outputs of its first call (when told to), so the engine can tell which of them the function
    returned. An engine that never calls straight keeps none: nothing would ever release them."""

    def __init__(self, compiled: Callable, input_ids: list[int], keep_first_outputs: bool = True):
        self.compiled, self.input_ids = compiled, input_ids
        self.first_outputs: list | None = None if keep_first_outputs else []

    def __call__(self, *args):
        outputs = self.compiled(*args)
        if self.first_outputs is None:
            self.first_outputs = list(outputs)
        return outputs


class GraphCapture:
    """A torch.compile backend: inductor's compile_fx with `options`, each graph it returns kept
    (with its first outputs only when `keep_first_outputs`: the engine calls graphs straight)."""

    def __init__(self, options: dict, keep_first_outputs: bool = True):
        self.options, self.keep_first_outputs = options, keep_first_outputs
        self.captured: list[CapturedGraph] = []

    def __call__(self, graph_module: torch.fx.GraphModule, example_inputs: list) -> CapturedGraph:
        from torch._inductor.compile_fx import compile_fx
        compiled = compile_fx(graph_module, example_inputs, config_patches=dict(self.options))
        graph = CapturedGraph(compiled, [id(example) for example in example_inputs], self.keep_first_outputs)
        self.captured.append(graph)
        return graph

    def take(self) -> list[CapturedGraph]:
        captured, self.captured = self.captured, []
        return captured


@dataclass(frozen=True)
class DirectCall:
    """One captured graph; where its inputs come from among a call's argument tensors, and where
    the function's result comes from among its outputs; and the guards (dynamo's own C++ tensor
    check: shape, stride, dtype, device, grad) those tensors must pass for the graph to serve."""

    graph: CapturedGraph
    input_tensors: tuple[int, ...]
    result_outputs: tuple[int, ...]
    result_is_tensor: bool
    guards: TensorGuards

    @classmethod
    def from_capture(cls, graph: CapturedGraph, tensors: list[torch.Tensor], result) -> DirectCall | None:
        """The mapping, or None when an input is no argument tensor, a result no graph output, or
        one tensor is passed twice (dynamo guards that tensor arguments are distinct objects)."""
        tensor_index = {id(tensor): i for i, tensor in enumerate(tensors)}
        # emptied, not reset to None: a later call through dynamo must not record (and hold) outputs again
        outputs, graph.first_outputs = graph.first_outputs or [], []
        if len(tensor_index) < len(tensors) or any(i not in tensor_index for i in graph.input_ids):
            return None
        results = [result] if isinstance(result, torch.Tensor) else result
        if not isinstance(results, (list, tuple)) or not all(isinstance(r, torch.Tensor) for r in results):
            return None
        output_index = [next((j for j, out in enumerate(outputs) if out is r), None) for r in results]
        if None in output_index:
            return None
        guards = TensorGuards(*tensors, dynamic_dims_sizes=None, dynamic_dims_strides=None)
        return cls(graph, tuple(tensor_index[i] for i in graph.input_ids), tuple(output_index),
                   isinstance(result, torch.Tensor), guards)

    def serves(self, tensors: list[torch.Tensor]) -> bool:
        return self.guards.check(*tensors) and len({id(tensor) for tensor in tensors}) == len(tensors)

    def __call__(self, tensors: list[torch.Tensor]):
        outputs = self.graph.compiled(*[tensors[i] for i in self.input_tensors])
        if self.result_is_tensor:
            return outputs[self.result_outputs[0]]
        return tuple(outputs[j] for j in self.result_outputs)
