#!/usr/bin/env python3
"""The gated delta rule's gradients from torch autograd, for tests/train/delta_rule_golden_test.cpp.

The rule as transformers 5.25 defines it for Qwen 3.5 (torch_chunk_gated_delta_rule /
torch_recurrent_gated_delta_rule with use_qk_l2norm_in_kernel=True), over three sequences
of one batch: 77 rows from a zero state (four chunks of brioche's 16 rows, the last ragged),
40 rows continuing a given state from position 37 (a prefix-shared branch: ragged first and
last chunks) and 5 rows; 2 key heads serving 4 value heads, key_dim 16, value_dim 24. The loss
is <dout, out> + <d_final, each sequence's final state>, so autograd gives d q, k, v, g, beta,
and d the initial state.

The golden is autograd through an f64 transcription of transformers' recurrent function (its
own functions cast to f32); autograd through transformers' own torch_chunk_gated_delta_rule
(f32) is checked against it here and its distance recorded.

Writes tests/fixtures/delta_rule/backward.safetensors (inputs, cotangents, gradients, f32) and
backward.json (sequences, shapes, versions).

Usage: python3 tools/oracle/delta_rule_backward_oracle.py   (CPU, seconds)
"""
import json
import os

import torch
import transformers
from safetensors.torch import save_file
from transformers.models.qwen3_5 import modeling_qwen3_5

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "delta_rule")
NK, NV, DK, DV = 2, 4, 16, 24
# (rows, first position, starts from zero)
SEQUENCES = [(77, 0, True), (40, 37, False), (5, 0, True)]


def recurrent_f64(q, k, v, g, beta, state):
    """One sequence, [T, H, D] inputs (q, k repeated to the value heads), transformers' recurrence in f64."""
    q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6) / DK ** 0.5
    k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    outs = []
    for t in range(q.shape[0]):
        state = state * g[t].exp()[:, None, None]
        kv_mem = (state * k[t, :, :, None]).sum(-2)
        delta = (v[t] - kv_mem) * beta[t, :, None]
        state = state + k[t, :, :, None] * delta[:, None, :]
        outs.append((state * q[t, :, :, None]).sum(-2))
    return torch.stack(outs), state


def run(inputs, rule):
    """out [n, NV·DV] and the final states [S, NV, DK, DV] of every sequence."""
    q, k, v, g, beta, init = inputs
    outs, finals, row = [], [], 0
    for (rows, _, starts), s0 in zip(SEQUENCES, init):
        sl = slice(row, row + rows)
        qh = q[sl].view(rows, NK, DK).repeat_interleave(NV // NK, dim=1)
        kh = k[sl].view(rows, NK, DK).repeat_interleave(NV // NK, dim=1)
        state = s0 if not starts else torch.zeros_like(s0)
        o, s = rule(qh, kh, v[sl].view(rows, NV, DV), g[sl], beta[sl], state)
        outs.append(o.reshape(rows, NV * DV))
        finals.append(s)
        row += rows
    return torch.cat(outs), torch.stack(finals)


def transformers_chunked(q, k, v, g, beta, state):
    o, s = modeling_qwen3_5.torch_chunk_gated_delta_rule(
        q[None], k[None], v[None], g[None], beta[None], initial_state=state[None], output_final_state=True,
        use_qk_l2norm_in_kernel=True)
    return o[0], s[0]


def main():
    gen = torch.Generator().manual_seed(47)
    n = sum(r for r, _, _ in SEQUENCES)
    f32 = lambda *shape: torch.randn(*shape, generator=gen, dtype=torch.float32)  # noqa: E731
    raw = {
        "q": f32(n, NK * DK), "k": f32(n, NK * DK), "v": f32(n, NV * DV),
        # g = −e^{A_log}·softplus(a + dt_bias) lies in (−∞, 0): here in about (−1.5, 0)
        "g": -torch.nn.functional.softplus(f32(n, NV)) * 0.7,
        "beta": torch.sigmoid(f32(n, NV)),
        "initial_state": f32(len(SEQUENCES), NV, DK, DV) * 0.3,
    }
    dout = f32(n, NV * DV)
    d_final = f32(len(SEQUENCES), NV, DK, DV)
    names = ["q", "k", "v", "g", "beta", "initial_state"]

    def grads(rule, dtype):
        xs = [raw[name].to(dtype).requires_grad_(True) for name in names]
        out, final = run(xs, rule)
        loss = (out * dout.to(dtype)).sum() + (final * d_final.to(dtype)).sum()
        loss.backward()
        return out.detach(), final.detach(), {name: x.grad for name, x in zip(names, xs)}

    out, final, golden = grads(recurrent_f64, torch.float64)
    _, _, chunked = grads(transformers_chunked, torch.float64)  # f32 inside
    distance = {}
    for name in names:
        scale = float(golden[name].abs().max())
        distance[name] = float((chunked[name].double() - golden[name]).abs().max()) / scale
        assert distance[name] < 1e-4, f"transformers' chunked form is {distance[name]} from the f64 recurrence on d{name}"

    tensors = {name: raw[name].contiguous() for name in names}
    tensors.update({"dout": dout, "d_final_state": d_final, "out": out.float(), "final_state": final.float()})
    tensors.update({"d_" + name: golden[name].float().contiguous() for name in names})
    os.makedirs(OUT, exist_ok=True)
    save_file(tensors, os.path.join(OUT, "backward.safetensors"))
    first, sequences = 0, []
    for rows, position, starts in SEQUENCES:
        sequences.append({"first_row": first, "n_rows": rows, "first_position": position, "starts": starts})
        first += rows
    with open(os.path.join(OUT, "backward.json"), "w") as f:
        json.dump({"n_k_heads": NK, "n_v_heads": NV, "key_dim": DK, "value_dim": DV, "sequences": sequences,
                   "generator": "tools/oracle/delta_rule_backward_oracle.py",
                   "transformers_chunked_f32_relative_distance": distance,
                   "torch": torch.__version__, "transformers": transformers.__version__}, f, indent=1)
        f.write("\n")
    print("transformers' chunked form (f32) from the f64 recurrence, max |Δ| / max |grad|: " +
          ", ".join(f"d{k} {v:.1e}" for k, v in distance.items()))


if __name__ == "__main__":
    torch.set_num_threads(2)
    main()
