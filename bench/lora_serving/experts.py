#!/usr/bin/env python3
"""The cost of LoRA on the MoE experts served unmerged (issues 46, 47), through
one `brioche serve` on a Qwen 3.5 MoE directory. --make writes one first with
bench/families/make_model.py's functions: qwen3.5-35b-a3b's shape (hidden 2048,
256 experts of 512, 8 a token, a shared expert of 512), its first --layers
layers, MLX 4-bit, but the fixture tokenizer's 512-token vocabulary (the server
refuses 248k embedding rows beside 512 token ids): no 248k-row head, so the
experts' share of a step, and the adapter's, is larger than in the whole model.

  writes two random PEFT adapters (rank --rank on experts.gate_up_proj and
  experts.down_proj of every layer, peft's ParamWrapper layout) into a temporary
  --lora-dir, starts the server, and alternates, --rounds times:
    batch 1   one request on the base, then one with adapter e0: decode tok/s
              = (N_LONG − N_SHORT) / (time of N_LONG tokens − time of N_SHORT)
    batch 8   8 concurrent requests on the base, then 8 over e0 and e1:
              generated tokens / wall time (prefill of 8 short prompts included)
  and prints the medians with every run, and beside each the server's CPU
  time per generated token (utime + stime of the process; less sensitive to
  other load on a shared machine than wall time). Completions are not
  streamed, token ids as prompts.

  python3 bench/lora_serving/experts.py --model /tmp/q35moe [--make] --brioche build/cpu/brioche [--threads 2]
"""
import argparse
import concurrent.futures
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "server"))
from peft_adapter import write_safetensors  # noqa: E402
from serve_process import Server  # noqa: E402

N_SHORT, N_LONG = 8, 136


def make_model(out, layers):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "families"))
    import make_model as mm
    config = mm.cut_layers(mm.load_config("qwen3.5-35b-a3b"), layers)
    config["vocab_size"] = 512  # tests/fixtures/qwen35/dense's tokenizer
    entries, overrides = mm.file_entries(mm.tensor_list(config), 4, 64)
    config["quantization"] = config["quantization_config"] = {"group_size": 64, "bits": 4, "mode": "affine",
                                                              **overrides}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        f.write(json.dumps(config, indent=2, sort_keys=True) + "\n")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(mm.TOKENIZERS["qwen35"], name), os.path.join(out, name))
    size = mm.write_safetensors(os.path.join(out, "model.safetensors"), entries, "cpu", 0)
    print(f"wrote {out}: qwen3.5-35b-a3b's first {layers} layers, 4-bit, vocabulary 512, {size / 1e9:.2f} GB")


def write_expert_adapter(directory, config, rank, seed):
    """A [E·r, in], B [out, r·E] for both expert parameters of every layer (f32 on f16's grid), alpha = 2·rank."""
    rng = np.random.default_rng(seed)
    E, hidden, inter = config["num_experts"], config["hidden_size"], config["moe_intermediate_size"]
    tensors = {}
    for layer in range(config["num_hidden_layers"]):
        prefix = f"base_model.model.model.layers.{layer}.mlp.experts."
        for name, fan_in, fan_out in (("base_layer.", hidden, 2 * inter), ("", inter, hidden)):
            a = rng.uniform(-1 / np.sqrt(fan_in), 1 / np.sqrt(fan_in), (E * rank, fan_in))
            b = rng.normal(0.0, 0.02, (fan_out, rank * E))
            tensors[prefix + name + "lora_A.weight"] = a.astype(np.float16).astype(np.float32)
            tensors[prefix + name + "lora_B.weight"] = b.astype(np.float16).astype(np.float32)
    os.makedirs(directory, exist_ok=True)
    write_safetensors(os.path.join(directory, "adapter_model.safetensors"), tensors)
    with open(os.path.join(directory, "adapter_config.json"), "w") as f:
        json.dump({"peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank, "target_modules": None,
                   "target_parameters": ["experts.gate_up_proj", "experts.down_proj"], "lora_dropout": 0.0}, f)


def complete(server, model, prompt, tokens):
    body = {"prompt": prompt, "max_tokens": tokens, "temperature": 0, "ignore_eos": True}
    if model:
        body["model"] = model
    start = time.perf_counter()
    status, text = server.post("/v1/completions", body)
    elapsed = time.perf_counter() - start
    assert status == 200, text
    assert json.loads(text)["usage"]["completion_tokens"] == tokens, text
    return elapsed


def prompt(i):
    return [(17 + 37 * i + 11 * j) % 500 + 3 for j in range(12)]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def batch1(server, model):
    """(decode tok/s, server CPU ms per decoded token)."""
    cpu0 = cpu_seconds(server.proc.pid)
    short = complete(server, model, prompt(0), N_SHORT)
    cpu1 = cpu_seconds(server.proc.pid)
    long = complete(server, model, prompt(0), N_LONG)
    cpu2 = cpu_seconds(server.proc.pid)
    return (N_LONG - N_SHORT) / (long - short), 1e3 * ((cpu2 - cpu1) - (cpu1 - cpu0)) / (N_LONG - N_SHORT)


def batch8(server, models):
    """(generated tok/s, server CPU ms per generated token)."""
    cpu0 = cpu_seconds(server.proc.pid)
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(len(models)) as pool:
        list(pool.map(lambda im: complete(server, im[1], prompt(im[0] + 1), N_LONG), enumerate(models)))
    wall = time.perf_counter() - start
    return len(models) * N_LONG / wall, 1e3 * (cpu_seconds(server.proc.pid) - cpu0) / (len(models) * N_LONG)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--make", action="store_true", help="write the model first (see above)")
    p.add_argument("--layers", type=int, default=4, help="with --make: layers kept")
    p.add_argument("--brioche", default="build/cpu/brioche")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    if a.make:
        make_model(a.model, a.layers)
    with open(os.path.join(a.model, "config.json")) as f:
        config = json.load(f)
    config = config.get("text_config", config)
    lora_dir = tempfile.mkdtemp(prefix="expert_lora_bench_")
    try:
        for i in range(2):
            write_expert_adapter(os.path.join(lora_dir, f"e{i}"), config, a.rank, 100 + i)
        print(f"load before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
        server = Server(a.brioche, a.model, "--lora-dir", lora_dir, threads=a.threads)
        try:
            complete(server, "", prompt(0), 4)  # warm-up
            complete(server, "e0", prompt(0), 4)
            runs = {"b1_base": [], "b1_lora": [], "b8_base": [], "b8_lora": []}
            for r in range(a.rounds):
                # The order within a round alternates too (base first, then the adapters first).
                for kind in (("base", "lora") if r % 2 == 0 else ("lora", "base")):
                    runs["b1_" + kind].append(batch1(server, "" if kind == "base" else "e0"))
                for kind in (("base", "lora") if r % 2 == 0 else ("lora", "base")):
                    runs["b8_" + kind].append(batch8(server, [""] * 8 if kind == "base" else ["e0", "e1"] * 4))
        finally:
            server.stop()
        load = os.getloadavg()
        med = {k: statistics.median(x[0] for x in v) for k, v in runs.items()}
        cpu = {k: statistics.median(x[1] for x in v) for k, v in runs.items()}
        print(f"{os.path.basename(a.model.rstrip('/'))}: rank-{a.rank} adapters on experts.gate_up_proj + "
              f"experts.down_proj of every layer, {a.threads} threads, {a.rounds} rounds alternated (median; all "
              "tok/s / CPU ms a token: "
              + ", ".join(f"{k} {[(round(x, 1), round(c, 1)) for x, c in v]}" for k, v in runs.items()) + ")")
        print(f"  batch-1 decode: base {med['b1_base']:.2f} tok/s, adapter {med['b1_lora']:.2f} tok/s "
              f"= {100 * med['b1_lora'] / med['b1_base']:.1f}% of the base; CPU {cpu['b1_base']:.1f} / "
              f"{cpu['b1_lora']:.1f} ms a token = {100 * cpu['b1_base'] / cpu['b1_lora']:.1f}%")
        print(f"  8 concurrent x {N_LONG} tokens: base {med['b8_base']:.2f} tok/s, 2 adapters "
              f"{med['b8_lora']:.2f} tok/s = {100 * med['b8_lora'] / med['b8_base']:.1f}% of the base; CPU "
              f"{cpu['b8_base']:.1f} / {cpu['b8_lora']:.1f} ms a token = "
              f"{100 * cpu['b8_base'] / cpu['b8_lora']:.1f}%")
        print(f"load after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    finally:
        shutil.rmtree(lora_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
