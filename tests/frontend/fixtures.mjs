// Traces shared by the front-end unit tests.

// The example of docs/trace-format.md (x**7, backward with retain_graph, then without),
// with defaults left out as the tracer leaves them out.
export const X7 = {
  version: 1,
  status: "ok",
  code: "import torch\nx = torch.tensor(2.0, requires_grad=True)\ny = x**7\ny.backward(retain_graph=True)\ny.backward()\n",
  nodes: [
    { id: 0, op: "PowBackward0", step: 0, seq: 0, line: 3, saved: [
      { name: "exponent", kind: "value", value: 7 },
      { name: "self", kind: "tensor", shape: [], dtype: "float32", bytes: 4, of: "x" },
    ], next: [1] },
    { id: 1, op: "AccumulateGrad", step: 0, line: 3, tensor: "x" },
  ],
  steps: [
    { kind: "forward", line: 3, index: 0, nodes: [{ id: 0, vars: ["y"] }, { id: 1 }], edges: [[0, 1]],
      tensors: [{ name: "x", shape: [], dtype: "float32", requires_grad: true, is_leaf: true, node: 1 }], saved_bytes: 4 },
    { kind: "backward", line: 4, api: "Tensor.backward", retain_graph: true, index: 1,
      nodes: [{ id: 0, order: 0, executed: true, vars: ["y"] }, { id: 1, order: 1, executed: true }],
      tensors: [{ name: "x", shape: [], dtype: "float32", requires_grad: true, is_leaf: true, node: 1,
        grad: { shape: [], dtype: "float32", has_grad_fn: false, norm: 448.0, values: 448.0 } }], saved_bytes: 4 },
    { kind: "backward", line: 5, api: "Tensor.backward", retain_graph: false, index: 2,
      nodes: [{ id: 0, freed: true, order: 0, executed: true, vars: ["y"] }, { id: 1, order: 1, executed: true }],
      tensors: [{ name: "x", shape: [], dtype: "float32", requires_grad: true, is_leaf: true, node: 1,
        grad: { shape: [], dtype: "float32", has_grad_fn: false, norm: 896.0, values: 896.0 } }] },
  ],
};
