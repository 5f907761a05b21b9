#!/usr/bin/env python3
"""The torch peer of `brioche bench` for Gemma 4 and Qwen 3.5 (dense and
MoE): a hand-written forward in plain torch (no transformers: the device
machine has none), reading the same safetensors directory, in bf16 on CUDA,
timed the way `brioche bench` times (random ids):

  pp N      one forward over N tokens from an empty cache (median of 3 after a warm-up)
  tg N      N greedy decode steps of 1 sequence after a 4-token prompt
  tg N xB   B sequences decoding together (aggregate tokens/s)

Decode steps run as one captured CUDA graph (static caches and states,
torch's SDPA, the sampled ids copied to the host each step as the engine
does); prefill runs eagerly. Why hand-written rather than transformers:
transformers is not installed there (its wheels and their dependencies
would have to be carried), and its eager decode is a Python loop over
modules, which would measure Python, not the GPU.

The math is transformers 5.25's (modeling_gemma4.py, modeling_qwen3_5.py,
modeling_qwen3_5_moe.py), checked against it on the tiny shapes by
check_local.py (logits of a prompt and of decode steps):

Gemma 4: x = E[t]·√H; per-layer inputs (E_p[t]·√P + norm(W_p x·H^-½))·2^-½;
  per layer: x += post_attn_norm(attn(in_norm(x))); x += post_ffn_norm(
  mlp(pre_ffn_norm(x))); x += post_pli_norm(W_proj(gelu(W_gate x)·pli_l));
  x *= layer_scalar. Attention: q/k RMSNorm, v RMSNorm without scale, RoPE
  per layer type (proportional: unrotated pairs have frequency 0), scale 1,
  a sliding window on sliding layers; KV-shared layers read the last
  earlier layer of their type's K/V (and in prefill run only the last row,
  as transformers does: nothing after them needs the other rows).
  Logits: tanh(x·Eᵀ/c)·c.
Qwen 3.5: zero-centred norms (x·(1 + w)); DeltaNet layers: in_proj_qkv →
  causal depthwise conv + SiLU → l2-normed q, k (q·dk^-½), β = σ(b),
  g = −e^{A_log}·softplus(a + dt_bias), the gated delta rule (chunks of 64,
  transformers' torch_chunk_gated_delta_rule, in prefill; the recurrent
  step in decode), RMSNormGated(·, z), out_proj. Gated attention: q and a
  gate from q_proj, q/k norms, partial RoPE (rotate-half on the first
  head_dim·0.25), output·σ(gate). MoE: softmax router, top-k renormalised,
  experts through torch's grouped GEMM (only the experts with rows are read),
  plus the shared expert·σ(x·w_sg).

  python3 bench/families/torch_peer.py --model DIR [--prefill 8192] [--decode 128] [--batch 64 --batch-steps 32]

Prints rows `| peer | test | tokens/s | ms |`.
"""
import argparse
import json
import math
import mmap
import os
import struct
import time

import torch
import torch.nn.functional as F

DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "I32": torch.int32,
          "U32": torch.int32}


class Safetensors:
    """The tensors of DIR/model.safetensors (or of every *.safetensors), read through mmap."""

    def __init__(self, directory):
        files = sorted(f for f in os.listdir(directory) if f.endswith(".safetensors"))
        if not files:
            raise FileNotFoundError(f"{directory}: no .safetensors file")
        self.index = {}
        self.maps = []
        for name in files:
            f = open(os.path.join(directory, name), "rb")
            m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
            self.maps.append(m)
            n = struct.unpack("<Q", m[:8])[0]
            header = json.loads(m[8:8 + n])
            for key, v in header.items():
                if key != "__metadata__":
                    self.index[key] = (m, 8 + n, v)

    def has(self, name):
        return name in self.index

    def get(self, name, device, dtype):
        if name not in self.index:
            raise KeyError(f"tensor {name!r} not in the checkpoint")
        m, base, v = self.index[name]
        if v["dtype"] not in ("BF16", "F16", "F32"):
            raise ValueError(f"{name}: dtype {v['dtype']} (the peer runs unquantized checkpoints only)")
        begin, end = v["data_offsets"]
        t = torch.frombuffer(m, dtype=torch.uint8, count=end - begin, offset=base + begin)
        t = t.view(DTYPES[v["dtype"]]).reshape(v["shape"])
        return t.to(device=device, dtype=dtype)


def rms(x, w, eps):
    """transformers' RMSNorm in f32, returned in x's dtype (w None: no scale)."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if w is not None:
        y = y * w
    return y.to(x.dtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), -1)


def rope(x, cos, sin):
    """x [B, heads, S, D]; cos/sin [B|1, S, R] with R <= D: rotate-half on the first R dims."""
    r = cos.shape[-1]
    cos, sin = cos[:, None], sin[:, None]
    if r == x.shape[-1]:
        return x * cos + rotate_half(x) * sin
    xr = x[..., :r]
    return torch.cat((xr * cos + rotate_half(xr) * sin, x[..., r:]), -1)


def cos_sin(inv_freq, positions, dtype):
    """positions [B|1, S] -> cos, sin [B|1, S, 2·len(inv_freq)] in dtype."""
    f = positions.float()[..., None] * inv_freq
    e = torch.cat((f, f), -1)
    return e.cos().to(dtype), e.sin().to(dtype)


def softcap(x, cap):
    return x if not cap else torch.tanh(x / cap) * cap


def grouped_experts(x, ids, weights, gate_up, down, act, grouped):
    """Rows x [T, H] through experts ids [T, k] with weights [T, k]: Σ w·down_e(act(gate_e x)·up_e x).
    gate_up [E, 2I, H], down [E, H, I]. grouped (on CUDA): one grouped GEMM per projection over the
    rows sorted by expert (graph-safe: offsets from a scatter-add, no host sync); else a loop over
    experts (check_local runs both on the CPU)."""
    T, k = ids.shape
    E = gate_up.shape[0]
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    rows = x[order // k]
    if grouped:
        counts = torch.zeros(E, dtype=torch.int32, device=x.device).scatter_add_(
            0, flat.int()[order].long(), torch.ones_like(flat, dtype=torch.int32))
        offs = torch.cumsum(counts, 0, dtype=torch.int32)
        mm = getattr(F, "grouped_mm", None) or torch._grouped_mm
        gu = mm(rows, gate_up.transpose(-2, -1), offs=offs)
        g, u = gu.chunk(2, -1)
        y = mm((act(g) * u).to(x.dtype), down.transpose(-2, -1), offs=offs)
    else:
        y = torch.empty(T * k, x.shape[-1], dtype=x.dtype, device=x.device)
        sorted_ids = flat[order]
        bounds = torch.searchsorted(sorted_ids, torch.arange(E + 1, device=x.device)).tolist()
        for e in range(E):
            a, b = bounds[e], bounds[e + 1]
            if a < b:
                g, u = (rows[a:b] @ gate_up[e].T).chunk(2, -1)
                y[a:b] = (act(g) * u) @ down[e].T
    y = y * weights.reshape(-1)[order, None].to(y.dtype)
    out = torch.zeros_like(x)
    return out.index_add_(0, order // k, y.to(x.dtype))


# ------------------------------------------------------------------ Gemma 4


class Gemma4:
    def __init__(self, config, st, device, dtype):
        c = config.get("text_config", config)
        self.c, self.device, self.dtype = c, device, dtype
        pre = "model.language_model." if st.has("model.language_model.embed_tokens.weight") else "model."
        g = lambda name: st.get(name, device, dtype)
        v = lambda name: st.get(name, device, torch.float32)  # norms, in f32 as transformers applies them
        self.H, self.L, self.V = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
        self.eps = c["rms_norm_eps"]
        self.P = c.get("hidden_size_per_layer_input") or 0
        self.nh = c["num_attention_heads"]
        self.window = c["sliding_window"]
        self.cap = c.get("final_logit_softcapping")
        self.embed = g(pre + "embed_tokens.weight")
        self.head = g("lm_head.weight") if st.has("lm_head.weight") else self.embed
        self.norm = v(pre + "norm.weight")
        if self.P:
            self.ple = g(pre + "embed_tokens_per_layer.weight")
            self.ple_proj = g(pre + "per_layer_model_projection.weight")
            self.ple_norm = v(pre + "per_layer_projection_norm.weight")
        n_shared = c.get("num_kv_shared_layers") or 0
        self.first_shared = self.L - n_shared if n_shared else self.L
        self.inv_freq = {}
        for t, p in c["rope_parameters"].items():
            hd = self.head_dim_of_type(t)
            angles = int(p.get("partial_rotary_factor", 1.0) * hd // 2) if p["rope_type"] == "proportional" else hd // 2
            f = 1.0 / (p["rope_theta"] ** (torch.arange(0, 2 * angles, 2, dtype=torch.float32) / hd))
            self.inv_freq[t] = torch.cat((f, torch.zeros(hd // 2 - angles))).to(device)
        self.layers = []
        last_of_type = {}
        # transformers writes per_layer_config's keys zero-padded past 9 layers ("05")
        per_layer = {int(k): v for k, v in c.get("per_layer_config", {}).items()}
        for i in range(self.L):
            p = f"{pre}layers.{i}."
            t = c["layer_types"][i]
            over = per_layer.get(i, {})
            hd, kvh = over.get("head_dim", c["head_dim"]), over.get("num_key_value_heads", c["num_key_value_heads"])
            l = dict(type=t, hd=hd, kvh=kvh, shared=i >= self.first_shared,
                     in_norm=v(p + "input_layernorm.weight"), wq=g(p + "self_attn.q_proj.weight"),
                     q_norm=v(p + "self_attn.q_norm.weight"), wo=g(p + "self_attn.o_proj.weight"),
                     post_attn=v(p + "post_attention_layernorm.weight"),
                     pre_ffn=v(p + "pre_feedforward_layernorm.weight"),
                     post_ffn=v(p + "post_feedforward_layernorm.weight"),
                     w_gu=torch.cat((g(p + "mlp.gate_proj.weight"), g(p + "mlp.up_proj.weight"))),
                     w_down=g(p + "mlp.down_proj.weight"),
                     scalar=v(p + "layer_scalar").to(dtype) if st.has(p + "layer_scalar") else None)
            if l["shared"]:
                l["source"] = last_of_type[t]
            else:
                wk = g(p + "self_attn.k_proj.weight")
                wv = g(p + "self_attn.v_proj.weight") if st.has(p + "self_attn.v_proj.weight") else None
                l["v_from_k"] = wv is None
                l["wkv"] = wk if wv is None else torch.cat((wk, wv))
                l["k_norm"] = v(p + "self_attn.k_norm.weight")
                last_of_type[t] = i
            if self.P:
                l.update(ple_gate=g(p + "per_layer_input_gate.weight"), ple_up=g(p + "per_layer_projection.weight"),
                         ple_post=v(p + "post_per_layer_input_norm.weight"))
            if c.get("enable_moe_block"):
                raise ValueError("the Gemma 4 MoE block is not in this peer")
            self.layers.append(l)
        self.caches = None

    def head_dim_of_type(self, t):
        c = self.c
        per_layer = {int(k): v for k, v in c.get("per_layer_config", {}).items()}
        for i, lt in enumerate(c["layer_types"]):
            if lt == t:
                return per_layer.get(i, {}).get("head_dim", c["head_dim"])
        return c["head_dim"]

    def new_caches(self, B, T):
        """K and V [B, kv_heads, T, head_dim] for each layer that computes K/V."""
        self.caches = {}
        for i, l in enumerate(self.layers):
            if not l["shared"]:
                k = torch.zeros(B, l["kvh"], T, l["hd"], device=self.device, dtype=self.dtype)
                self.caches[i] = (k, torch.zeros_like(k))
        self.T = T

    def per_layer_inputs(self, tokens, x):
        B, S = tokens.shape
        ple = (self.ple[tokens] * torch.tensor(self.P ** 0.5, dtype=self.dtype)).reshape(B, S, self.L, self.P)
        proj = (x @ self.ple_proj.T) * (self.H ** -0.5)
        proj = rms(proj.reshape(B, S, self.L, self.P), self.ple_norm, self.eps)
        return (proj + ple) * (2.0 ** -0.5)

    def forward(self, tokens, positions, masks):
        """tokens/positions [B, S]; masks: per layer type, the additive/bool mask over the cache (decode) or
        None (prefill from an empty cache). Writes K/V at positions; returns the last row's logits [B, V]."""
        B, S = tokens.shape
        decode = masks is not None
        x = self.embed[tokens] * torch.tensor(self.H ** 0.5, dtype=self.dtype)
        pli = self.per_layer_inputs(tokens, x) if self.P else None
        rot = {t: cos_sin(f, positions, self.dtype) for t, f in self.inv_freq.items()}
        for i, l in enumerate(self.layers):
            if i == self.first_shared and not decode and S > 1:
                # Only the last row is needed past here: KV-shared layers write no cache.
                x, positions = x[:, -1:], positions[:, -1:]
                pli = pli[:, -1:] if pli is not None else None
                rot = {t: (cs[0][:, -1:], cs[1][:, -1:]) for t, cs in rot.items()}
            Sx = x.shape[1]
            hd, t = l["hd"], l["type"]
            cos, sin = rot[t]
            h = rms(x, l["in_norm"], self.eps)
            q = rms((h @ l["wq"].T).view(B, Sx, self.nh, hd), l["q_norm"], self.eps).transpose(1, 2)
            q = rope(q, cos, sin)
            if l["shared"]:
                k, v = self.caches[l["source"]]
            else:
                kv = (h @ l["wkv"].T).view(B, Sx, -1, hd)
                k_raw, v_raw = (kv, kv) if l["v_from_k"] else kv.chunk(2, 2)
                k_new = rope(rms(k_raw, l["k_norm"], self.eps).transpose(1, 2), cos, sin)
                v_new = rms(v_raw, None, self.eps).transpose(1, 2)
                kc, vc = self.caches[i]
                if decode:
                    kc.index_copy_(2, positions[0], k_new)
                    vc.index_copy_(2, positions[0], v_new)
                    k, v = kc, vc
                else:
                    kc[:, :, :S] = k_new
                    vc[:, :, :S] = v_new
                    k, v = k_new, v_new
            if decode:
                a = F.scaled_dot_product_attention(q, k, v, attn_mask=masks[t], scale=1.0, enable_gqa=True)
            elif Sx == S:  # prefill rows against themselves
                mask = self.prefill_masks[t]
                a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, scale=1.0,
                                                   enable_gqa=True)
            else:  # the last prompt row of a KV-shared layer against the prompt's K/V
                k, v = k[:, :, :S], v[:, :, :S]
                mask = None
                if t == "sliding_attention":
                    mask = (torch.arange(S, device=self.device) > S - 1 - self.window)[None]
                a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0, enable_gqa=True)
            a = a.transpose(1, 2).reshape(B, Sx, self.nh * hd) @ l["wo"].T
            x = x + rms(a, l["post_attn"], self.eps)
            h = rms(x, l["pre_ffn"], self.eps)
            gate, up = (h @ l["w_gu"].T).chunk(2, -1)
            x = x + rms((F.gelu(gate, approximate="tanh") * up) @ l["w_down"].T, l["post_ffn"], self.eps)
            if self.P:
                gq = F.gelu(x @ l["ple_gate"].T, approximate="tanh") * pli[:, :, i]
                x = x + rms(gq @ l["ple_up"].T, l["ple_post"], self.eps)
            if l["scalar"] is not None:
                x = x * l["scalar"]
        x = rms(x[:, -1], self.norm, self.eps)
        return softcap((x @ self.head.T).float(), self.cap)

    def prefill(self, tokens):
        S = tokens.shape[1]
        i = torch.arange(S, device=self.device)
        causal = i[None, :] <= i[:, None]
        self.prefill_masks = {"full_attention": None,
                              "sliding_attention": causal & (i[None, :] > i[:, None] - self.window)}
        positions = i[None].expand(tokens.shape[0], S)
        return self.forward(tokens, positions, None)

    def decode_masks(self, pos):
        """Bool masks [1, 1, 1, T] over the cache for a step at position pos (a [1] tensor)."""
        j = torch.arange(self.T, device=self.device)
        full = (j <= pos)[None, None, None]
        return {"full_attention": full,
                "sliding_attention": full & (j > pos - self.window)[None, None, None]}

    def decode(self, tokens, pos):
        return self.forward(tokens, pos.view(1, 1).expand(tokens.shape[0], 1), self.decode_masks(pos))


# ------------------------------------------------------------------ Qwen 3.5


class Qwen35:
    def __init__(self, config, st, device, dtype):
        c = config.get("text_config", config)
        self.c, self.device, self.dtype = c, device, dtype
        pre = "model.language_model." if st.has("model.language_model.embed_tokens.weight") else "model."
        g = lambda name: st.get(name, device, dtype)
        one_plus = lambda name: 1.0 + st.get(name, device, torch.float32)  # zero-centred norms
        self.H, self.L, self.eps = c["hidden_size"], c["num_hidden_layers"], c["rms_norm_eps"]
        self.nh, self.kvh, self.hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        self.nk, self.nv = c["linear_num_key_heads"], c["linear_num_value_heads"]
        self.dk, self.dv = c["linear_key_head_dim"], c["linear_value_head_dim"]
        self.K = c["linear_conv_kernel_dim"]
        self.conv_dim = 2 * self.nk * self.dk + self.nv * self.dv
        self.moe = "num_experts" in c
        self.grouped_mm = device.type == "cuda"  # the experts through torch's grouped GEMM (else a loop)
        self.top_k = c.get("num_experts_per_tok")
        rp = c["rope_parameters"]
        rot = int(self.hd * rp.get("partial_rotary_factor", 1.0))
        self.inv_freq = (1.0 / (rp["rope_theta"] ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot))).to(device)
        self.embed = g(pre + "embed_tokens.weight")
        self.head = g("lm_head.weight") if st.has("lm_head.weight") else self.embed
        self.norm = one_plus(pre + "norm.weight")
        self.layers = []
        for i in range(self.L):
            p = f"{pre}layers.{i}."
            l = dict(type=c["layer_types"][i], in_norm=one_plus(p + "input_layernorm.weight"),
                     post_norm=one_plus(p + "post_attention_layernorm.weight"))
            if l["type"] == "linear_attention":
                a = p + "linear_attn."
                l.update(w_in=torch.cat((g(a + "in_proj_qkv.weight"), g(a + "in_proj_z.weight"),
                                         g(a + "in_proj_b.weight"), g(a + "in_proj_a.weight"))),
                         conv=g(a + "conv1d.weight")[:, 0], dt_bias=st.get(a + "dt_bias", device, torch.float32),
                         A=-st.get(a + "A_log", device, torch.float32).exp(),
                         gnorm=st.get(a + "norm.weight", device, torch.float32), w_out=g(a + "out_proj.weight"))
            else:
                a = p + "self_attn."
                l.update(wq=g(a + "q_proj.weight"), wkv=torch.cat((g(a + "k_proj.weight"), g(a + "v_proj.weight"))),
                         wo=g(a + "o_proj.weight"), q_norm=one_plus(a + "q_norm.weight"),
                         k_norm=one_plus(a + "k_norm.weight"))
            m = p + "mlp."
            if self.moe:
                E = c["num_experts"]
                l.update(router=g(m + "gate.weight"),
                         gate_up=torch.stack([torch.cat((g(f"{m}experts.{e}.gate_proj.weight"),
                                                         g(f"{m}experts.{e}.up_proj.weight"))) for e in range(E)]),
                         down=torch.stack([g(f"{m}experts.{e}.down_proj.weight") for e in range(E)]),
                         s_gu=torch.cat((g(m + "shared_expert.gate_proj.weight"), g(m + "shared_expert.up_proj.weight"))),
                         s_down=g(m + "shared_expert.down_proj.weight"), s_gate=g(m + "shared_expert_gate.weight"))
            else:
                l.update(w_gu=torch.cat((g(m + "gate_proj.weight"), g(m + "up_proj.weight"))),
                         w_down=g(m + "down_proj.weight"))
            self.layers.append(l)

    def new_caches(self, B, T):
        self.T = T
        self.caches, self.conv_state, self.rec_state = {}, {}, {}
        for i, l in enumerate(self.layers):
            if l["type"] == "linear_attention":
                self.conv_state[i] = torch.zeros(B, self.conv_dim, self.K - 1, device=self.device, dtype=self.dtype)
                self.rec_state[i] = torch.zeros(B, self.nv, self.dk, self.dv, device=self.device, dtype=torch.float32)
            else:
                k = torch.zeros(B, self.kvh, T, self.hd, device=self.device, dtype=self.dtype)
                self.caches[i] = (k, torch.zeros_like(k))

    def mlp(self, l, h):
        if not self.moe:
            g, u = (h @ l["w_gu"].T).chunk(2, -1)
            return (F.silu(g) * u) @ l["w_down"].T
        B, S, H = h.shape
        x = h.reshape(-1, H)
        probs = torch.softmax((x @ l["router"].T).float(), -1)
        w, ids = torch.topk(probs, self.top_k, -1)
        w = (w / w.sum(-1, keepdim=True)).to(h.dtype)
        y = grouped_experts(x, ids, w, l["gate_up"], l["down"], F.silu, self.grouped_mm)
        g, u = (x @ l["s_gu"].T).chunk(2, -1)
        y = y + torch.sigmoid(x @ l["s_gate"].T) * ((F.silu(g) * u) @ l["s_down"].T)
        return y.reshape(B, S, H)

    def delta_rule_chunked(self, q, k, v, g, beta, chunk=64):
        """transformers' torch_chunk_gated_delta_rule from a zero state: q/k/v [B, S, heads, d] (q, k already
        repeated to the value heads, l2-normed, q scaled), g/beta [B, S, heads]; returns out [B, S, heads, dv]
        and the final state [B, heads, dk, dv] (f32)."""
        B, S, Hh, dk = k.shape
        dv = v.shape[-1]
        q, k, v, beta, g = [x.transpose(1, 2).float().contiguous() for x in (q, k, v, beta, g)]
        pad = (chunk - S % chunk) % chunk
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        beta, g = (F.pad(x, (0, pad)) for x in (beta, g))
        n = (S + pad) // chunk
        v_beta, k_beta = v * beta[..., None], k * beta[..., None]
        q, k, k_beta, v_beta = (x.reshape(B, Hh, n, chunk, -1) for x in (q, k, k_beta, v_beta))
        g = g.reshape(B, Hh, n, chunk).cumsum(-1)
        upper = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).triu(1)
        decay = (g[..., :, None] - g[..., None, :]).masked_fill(upper, float("-inf")).exp()
        ut = (k_beta @ k.transpose(-1, -2)) * decay
        intra = (q @ k.transpose(-1, -2)) * decay
        u = torch.linalg.solve_triangular(ut, v_beta, upper=False, unitriangular=True)
        w = torch.linalg.solve_triangular(ut, k_beta * g.exp()[..., None], upper=False, unitriangular=True)
        q = q * g.exp()[..., None]
        k = k * (g[..., -1:] - g).exp()[..., None]
        chunk_decay = g[..., -1].exp()[..., None, None]
        state = torch.zeros(B, Hh, dk, dv, device=q.device, dtype=torch.float32)
        out = torch.empty_like(u)
        for i in range(n):
            v_new = u[:, :, i] - w[:, :, i] @ state
            out[:, :, i] = q[:, :, i] @ state + intra[:, :, i] @ v_new
            state = state * chunk_decay[:, :, i] + k[:, :, i].transpose(-1, -2) @ v_new
        out = out.reshape(B, Hh, -1, dv)[:, :, :S].transpose(1, 2)
        return out, state

    def linear_attn(self, i, l, h, decode):
        B, S, _ = h.shape
        nkd, nvd = self.nk * self.dk, self.nv * self.dv
        proj = h @ l["w_in"].T
        qkv, z, b, a = proj.split([self.conv_dim, nvd, self.nv, self.nv], -1)
        x = qkv.transpose(1, 2)  # [B, C, S]
        cs = self.conv_state[i]
        if decode:
            window = torch.cat((cs, x), -1)  # [B, C, K]
            conv = F.silu((window.float() * l["conv"].float()).sum(-1, keepdim=True)).to(h.dtype)
            cs.copy_(window[:, :, 1:])
        else:
            conv = F.silu(F.conv1d(F.pad(x, (self.K - 1, 0)), l["conv"][:, None], groups=self.conv_dim))
            cs.copy_(F.pad(x, (max(0, self.K - 1 - S), 0))[:, :, -(self.K - 1):])
        conv = conv.transpose(1, 2)
        q, k, v = conv.split([nkd, nkd, nvd], -1)
        rep = self.nv // self.nk
        q = q.reshape(B, S, self.nk, self.dk).float().repeat_interleave(rep, 2)
        k = k.reshape(B, S, self.nk, self.dk).float().repeat_interleave(rep, 2)
        v = v.reshape(B, S, self.nv, self.dv)
        q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6) * (self.dk ** -0.5)
        k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
        beta = torch.sigmoid(b.float())
        g = l["A"] * F.softplus(a.float() + l["dt_bias"])
        st = self.rec_state[i]
        if decode:  # S == 1: the recurrent form
            s = st * g[:, 0, :, None, None].exp()
            kt, qt = k[:, 0], q[:, 0]
            mem = (s * kt[..., None]).sum(-2)
            delta = (v[:, 0].float() - mem) * beta[:, 0, :, None]
            s = s + kt[..., None] * delta[..., None, :]
            st.copy_(s)
            out = (s * qt[..., None]).sum(-2)[:, None]
        else:
            out, final = self.delta_rule_chunked(q, k, v, g, beta)
            st.copy_(final)
        o = out.reshape(B, S, self.nv, self.dv)
        o = (rms(o.float(), None, self.eps).to(h.dtype).float() * l["gnorm"]) * F.silu(
            z.reshape(B, S, self.nv, self.dv).float())
        return o.to(h.dtype).reshape(B, S, nvd) @ l["w_out"].T

    def attention(self, i, l, h, positions, mask):
        B, S, _ = h.shape
        qg = (h @ l["wq"].T).view(B, S, self.nh, 2 * self.hd)
        q, gate = qg.chunk(2, -1)
        kv = (h @ l["wkv"].T).view(B, S, 2 * self.kvh, self.hd)
        k, v = kv.chunk(2, 2)
        cos, sin = cos_sin(self.inv_freq, positions, h.dtype)
        q = rope(rms(q, l["q_norm"], self.eps).transpose(1, 2), cos, sin)
        k = rope(rms(k, l["k_norm"], self.eps).transpose(1, 2), cos, sin)
        v = v.transpose(1, 2)
        kc, vc = self.caches[i]
        if mask is not None:  # decode
            kc.index_copy_(2, positions[0], k)
            vc.index_copy_(2, positions[0], v)
            o = F.scaled_dot_product_attention(q, kc, vc, attn_mask=mask, enable_gqa=True)
        else:
            kc[:, :, :S], vc[:, :, :S] = k, v
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        o = o.transpose(1, 2).reshape(B, S, -1) * torch.sigmoid(gate.reshape(B, S, -1))
        return o @ l["wo"].T

    def forward(self, tokens, positions, mask):
        x = self.embed[tokens]
        for i, l in enumerate(self.layers):
            h = rms(x, l["in_norm"], self.eps)
            if l["type"] == "linear_attention":
                x = x + self.linear_attn(i, l, h, mask is not None)
            else:
                x = x + self.attention(i, l, h, positions, mask)
            x = x + self.mlp(l, rms(x, l["post_norm"], self.eps))
        x = rms(x[:, -1], self.norm, self.eps)
        return (x @ self.head.T).float()

    def prefill(self, tokens):
        S = tokens.shape[1]
        positions = torch.arange(S, device=self.device)[None].expand(tokens.shape[0], S)
        return self.forward(tokens, positions, None)

    def decode(self, tokens, pos):
        mask = (torch.arange(self.T, device=self.device) <= pos)[None, None, None]
        return self.forward(tokens, pos.view(1, 1).expand(tokens.shape[0], 1), mask)


def load_model(directory, device, dtype):
    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    if "quantization" in config:
        raise ValueError("quantized checkpoint: the peer runs bf16 only")
    t = config.get("text_config", config)["model_type"]
    st = Safetensors(directory)
    return (Gemma4 if t.startswith("gemma4") else Qwen35)(config, st, device, dtype)


# ------------------------------------------------------------------ timing


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def decode_rate(m, B, steps, prompt=4, graphs=True):
    """B sequences after a `prompt`-token prefill each, `steps` greedy steps (ids to the host every step)."""
    dev = m.device
    m.new_caches(B, prompt + steps + 8)
    tokens = torch.randint(0, m.c["vocab_size"], (B, prompt), device=dev)
    pos = torch.full((1,), prompt, dtype=torch.long, device=dev)
    nxt = m.prefill(tokens).argmax(-1, keepdim=True)

    def step():
        nxt.copy_(m.decode(nxt, pos).argmax(-1, keepdim=True))
        pos.add_(1)

    run = step
    if graphs and dev.type == "cuda":
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(s)
        try:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                step()
            run = graph.replay
        except Exception as e:  # an op that cannot be captured: time the eager step, and say so
            torch.cuda.synchronize()
            print(f"torch_peer: decode x{B} without a CUDA graph (capture failed: {str(e).splitlines()[0]})",
                  flush=True)
    pos.fill_(prompt)
    for _ in range(2):
        run()
    pos.fill_(prompt)
    sync(dev)
    t0 = time.perf_counter()
    for _ in range(steps):
        run()
        nxt.cpu()
    dt = time.perf_counter() - t0
    return B * steps / dt, 1e3 * dt / steps


def prefill_rate(m, n, reps=3):
    dev = m.device
    m.new_caches(1, n + 8)
    times = []
    for r in range(reps + 1):
        tokens = torch.randint(0, m.c["vocab_size"], (1, n), device=dev)
        sync(dev)
        t0 = time.perf_counter()
        logits = m.prefill(tokens)
        logits.argmax(-1).cpu()
        if r:
            times.append(time.perf_counter() - t0)
        elif not torch.isfinite(logits).all():
            print("torch_peer: NOT FINITE: the prompt's last logits hold NaN or Inf", flush=True)
    t = sorted(times)[len(times) // 2]
    return n / t, 1e3 * t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prefill", type=int, default=0, help="prompt length to time (0: skip)")
    ap.add_argument("--decode", type=int, default=128, help="decode steps at batch 1 (0: skip)")
    ap.add_argument("--batch", type=int, default=0, help="rows decoding together (0: skip)")
    ap.add_argument("--batch-steps", type=int, default=32)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--no-graphs", action="store_true")
    a = ap.parse_args()
    dev = torch.device(a.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    name = os.path.basename(os.path.normpath(a.model))
    with torch.inference_mode():
        t0 = time.perf_counter()
        m = load_model(a.model, dev, torch.bfloat16)
        sync(dev)
        print(f"torch_peer: {name} loaded in {time.perf_counter() - t0:.1f} s (torch {torch.__version__}, {dev})",
              flush=True)
        tests = []
        if a.prefill:
            tests.append((f"pp {a.prefill}", lambda: prefill_rate(m, a.prefill)))
        if a.decode:
            tests.append((f"tg {a.decode}", lambda: decode_rate(m, 1, a.decode, graphs=not a.no_graphs)))
        if a.batch:
            tests.append((f"tg {a.batch_steps} x{a.batch}",
                          lambda: decode_rate(m, a.batch, a.batch_steps, graphs=not a.no_graphs)))
        for test, measure in tests:  # one failing test (memory, an op) leaves the others their numbers
            try:
                tps, ms = measure()
                print(f"| torch {name} | {test} | {tps:.1f} | {ms:.2f} |", flush=True)
            except Exception as e:
                print(f"torch_peer: {test} failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                      flush=True)
                if dev.type == "cuda":
                    torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
