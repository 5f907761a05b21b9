"""Torch peer for bench/cuda_model.cpp: a hand-written Llama forward in bf16
with a static KV cache, the decode step captured once and replayed as a CUDA
graph; prefill runs eagerly. Random weights in the same shapes.

  python3 bench/cuda_torch_peer.py --shape llama3-8b [--decode 128] [--prefill 2048]
                                   [--batch 64 --context 1024]

Prints the same table rows as cuda_model_bench (tokens/s, ms/step).
"""
import argparse
import time

import torch
import torch.nn.functional as F

SHAPES = {  # vocab, hidden, inter, layers, heads, kv_heads, head_dim, tied
    "llama3-8b": (128256, 4096, 14336, 32, 32, 8, 128, False),
    "qwen2.5-7b": (152064, 3584, 18944, 28, 28, 4, 128, False),
    "smollm2-135m": (49152, 576, 1536, 30, 9, 3, 64, True),
}


class Llama:
    def __init__(self, shape, dev="cuda", dtype=torch.bfloat16):
        v, h, i, L, H, KV, D, tied = SHAPES[shape]
        self.v, self.h, self.i, self.L, self.H, self.KV, self.D = v, h, i, L, H, KV, D
        g = torch.Generator(device=dev).manual_seed(0)
        r = lambda *s: (torch.rand(*s, device=dev, generator=g, dtype=torch.float32) * 0.1 - 0.05).to(dtype)
        self.embed = r(v, h)
        self.lm_head = self.embed if tied else r(v, h)
        self.layers = [dict(wqkv=r((H + 2 * KV) * D, h), wo=r(h, H * D), wgu=r(2 * i, h), wd=r(h, i),
                            n1=torch.ones(h, device=dev, dtype=dtype), n2=torch.ones(h, device=dev, dtype=dtype))
                       for _ in range(L)]
        self.norm = torch.ones(h, device=dev, dtype=dtype)
        self.inv_freq = 1.0 / (500000.0 ** (torch.arange(0, D, 2, device=dev, dtype=torch.float32) / D))

    def rope(self, x, pos):  # x [B, heads, T, D], pos [B, T] (rotate-half)
        ang = pos[:, None, :, None].float() * self.inv_freq
        c, s = ang.cos(), ang.sin()
        x1, x2 = x[..., : self.D // 2].float(), x[..., self.D // 2:].float()
        return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], -1).to(x.dtype)

    def forward(self, tokens, pos, kc, vc, mask):
        """tokens/pos [B, T]; kc/vc per layer [B, KV, Lmax, D]; mask [B|1, 1, T, Lmax] additive."""
        B, T = tokens.shape
        x = self.embed[tokens]
        for l, w in enumerate(self.layers):
            hn = F.rms_norm(x, (self.h,), w["n1"], 1e-5)
            qkv = hn @ w["wqkv"].T
            q, k, v = qkv.split([self.H * self.D, self.KV * self.D, self.KV * self.D], -1)
            q = self.rope(q.view(B, T, self.H, self.D).transpose(1, 2), pos)
            k = self.rope(k.view(B, T, self.KV, self.D).transpose(1, 2), pos)
            v = v.view(B, T, self.KV, self.D).transpose(1, 2)
            kc[l].index_copy_(2, pos[0], k)
            vc[l].index_copy_(2, pos[0], v)
            a = F.scaled_dot_product_attention(q, kc[l], vc[l], attn_mask=mask, enable_gqa=True)
            x = x + a.transpose(1, 2).reshape(B, T, -1) @ w["wo"].T
            hn = F.rms_norm(x, (self.h,), w["n2"], 1e-5)
            g, u = (hn @ w["wgu"].T).chunk(2, -1)
            x = x + (F.silu(g) * u) @ w["wd"].T
        return F.rms_norm(x[:, -1], (self.h,), self.norm, 1e-5) @ self.lm_head.T


def decode_rate(m, B, ctx, steps):
    Lmax = ctx + steps + 16
    kc = [torch.zeros(B, m.KV, Lmax, m.D, device="cuda", dtype=torch.bfloat16) for _ in range(m.L)]
    vc = [torch.zeros_like(t) for t in kc]
    tokens = torch.zeros(B, 1, dtype=torch.long, device="cuda")
    pos = torch.full((B, 1), ctx, dtype=torch.long, device="cuda")
    ar = torch.arange(Lmax, device="cuda")
    mask = torch.zeros(1, 1, 1, Lmax, device="cuda", dtype=torch.bfloat16)

    def step():
        mask.copy_(torch.where(ar <= pos[0, 0], 0.0, float("-inf")).to(mask.dtype).view(1, 1, 1, -1))
        tokens.copy_(m.forward(tokens, pos, kc, vc, mask).argmax(-1, keepdim=True))
        pos.add_(1)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    pos.fill_(ctx)
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    pos.fill_(ctx)
    t0 = time.perf_counter()
    for _ in range(steps):
        graph.replay()
        tokens.cpu()  # the sampled ids reach the host each step, as in the engine
    dt = time.perf_counter() - t0
    return B * steps / dt, 1e3 * dt / steps


def prefill_rate(m, n):
    kc = [torch.zeros(1, m.KV, n + 16, m.D, device="cuda", dtype=torch.bfloat16) for _ in range(m.L)]
    vc = [torch.zeros_like(t) for t in kc]
    tokens = torch.randint(0, m.v, (1, n), device="cuda")
    pos = torch.arange(n, device="cuda")[None]
    mask = torch.full((n, n + 16), float("-inf"), device="cuda").triu(1)[None, None].to(torch.bfloat16)
    times = []
    for rep in range(4):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        m.forward(tokens, pos, kc, vc, mask).argmax(-1).cpu()
        if rep:
            times.append(time.perf_counter() - t0)
    t = sorted(times)[len(times) // 2]
    return n / t, 1e3 * t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="llama3-8b")
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--prefill", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--batch-steps", type=int, default=32)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    with torch.inference_mode():
        m = Llama(a.shape)
        row = lambda test, tps, ms: print(f"| {a.shape} | bf16 | torch {torch.__version__} | {test} | {tps:.1f} | {ms:.3f} |", flush=True)
        if a.decode:
            row("decode b1", *decode_rate(m, 1, 128, a.decode))
        if a.prefill:
            row(f"prefill {a.prefill}", *prefill_rate(m, a.prefill))
        if a.batch:
            row(f"decode b{a.batch}@{a.context}", *decode_rate(m, a.batch, a.context, a.batch_steps))


if __name__ == "__main__":
    main()
