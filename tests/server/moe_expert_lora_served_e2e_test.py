#!/usr/bin/env python3
"""LoRA on the MoE experts served unmerged, per request, end to end through
HTTP (issues 46, 47), on the moe fixtures of Gemma 4 and Qwen 3.5
(tests/fixtures/{gemma4,qwen35}/moe) with peft's adapter of
lora/moe_experts (tools/oracle/{gemma4,qwen35}_lora_oracle.py: random
non-zero factors on every projection, both expert parameters
experts.gate_up_proj / experts.down_proj, and on Qwen 3.5 the shared
expert's gate/up/down_proj and shared_expert_gate) and a second adapter
written here by peft (rank 2, alpha 4, o_proj and experts.down_proj only,
on Qwen 3.5 shared_expert_gate too):

  - `serve --lora p=... --lora q=...`: each adapter's greedy tokens equal
    peft + transformers' greedy reference (f64, tests/server/greedy_reference.py)
    and its text equals `brioche run --adapter DIR` (merged at load); the
    base model's name answers with the base's tokens;
  - a batch of six concurrent requests over both adapters and the base gives
    each request the tokens it gets alone;
  - an expert adapter for another model (one expert fewer in a factor, or a
    gate_up_proj factor of another width) loaded at run time is 400 with a
    one-line message naming the tensor, and the server keeps serving.

Usage: moe_expert_lora_served_e2e_test.py --brioche build/cpu/brioche [--model tests/fixtures]
Exits 77 (skipped) when the binary, torch, transformers, peft or safetensors is missing.
"""
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from greedy_reference import greedy_decode  # noqa: E402
from serve_process import Server, e2e_main  # noqa: E402

ARGS = None
N_TOKENS = 8


def golden_prompt(family):
    """The first text prompt of the moe fixture's golden and its token ids (no BOS: what `run --raw` reads)."""
    path = os.path.join(ARGS.model, "gemma4", "goldens", "moe.json") if family == "gemma4" else os.path.join(
        ARGS.model, "qwen35", "moe", "golden.json")
    with open(path) as f:
        p = json.load(f)["text_prompts"][0]
    return p["text"], p["ids"]


def load_base(family, model_dir):
    import torch
    from transformers import Gemma4ForConditionalGeneration, Qwen3_5MoeForCausalLM
    cls = Gemma4ForConditionalGeneration if family == "gemma4" else Qwen3_5MoeForCausalLM
    model = cls.from_pretrained(model_dir, dtype=torch.float64, attn_implementation="eager")
    model.config.get_text_config()._experts_implementation = "eager"
    return model.eval()


def write_second_adapter(family, model_dir, out):
    """Q: peft's adapter with random non-zero factors (f32 values) on o_proj and experts.down_proj (and Qwen 3.5's
    shared_expert_gate), rank 2, alpha 4."""
    import torch
    from peft import LoraConfig, get_peft_model
    model = load_base(family, model_dir)
    if family == "gemma4":  # a Gemma4ForConditionalGeneration: the text model's modules only
        targets = r".*language_model\.layers\.\d+\.self_attn\.o_proj"
    else:
        targets = ["o_proj", "shared_expert_gate"]
    model = get_peft_model(model, LoraConfig(r=2, lora_alpha=4, target_modules=targets, lora_dropout=0.0,
                                             target_parameters=["experts.down_proj"], task_type="CAUSAL_LM"))
    gen = torch.Generator().manual_seed(47)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_((torch.randn(p.shape, generator=gen, dtype=torch.float64) * 0.3).float().double())
    model.to(torch.float32).save_pretrained(out)  # f32 factors, as brioche and peft's oracle adapters store them


def peft_greedy(family, model_dir, adapter, prompt_ids):
    from peft import PeftModel
    model = load_base(family, model_dir)
    if adapter:
        model = PeftModel.from_pretrained(model, adapter).eval()
    return greedy_decode(model, os.path.join(model_dir, "tokenizer.json"), prompt_ids, N_TOKENS)[0]


def broken_copy(src, dst, family, what):
    """src's adapter with layer 1's experts.down_proj factors for one expert fewer ("fewer") or its
    experts.gate_up_proj lora_B two rows wider ("wider"); returns the tensor named in the expected error."""
    from safetensors.numpy import load_file, save_file
    import numpy as np
    os.makedirs(dst, exist_ok=True)
    shutil.copy(os.path.join(src, "adapter_config.json"), dst)
    tensors = load_file(os.path.join(src, "adapter_model.safetensors"))
    layers = "base_model.model.model.language_model.layers.1." if family == "gemma4" else \
        "base_model.model.model.layers.1.mlp."
    if what == "fewer":  # A [E·r, in] -> [(E-1)·r, in], B [out, r·E] -> [out, r·(E-1)]
        a, b = layers + "experts.lora_A.weight", layers + "experts.lora_B.weight"
        r = tensors[a].shape[0] // 4
        tensors[a] = np.ascontiguousarray(tensors[a][:-r])
        tensors[b] = np.ascontiguousarray(tensors[b][:, :-r])
        named = a
    else:
        named = layers + "experts.base_layer.lora_B.weight"
        tensors[named] = np.zeros((tensors[named].shape[0] + 2, tensors[named].shape[1]), dtype=np.float32)
    save_file(tensors, os.path.join(dst, "adapter_model.safetensors"))
    return named


class MoeExpertLoraServed(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="moe_expert_lora_served_")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def complete(self, server, model, prompt_ids):
        status, body = server.post("/v1/completions", {"model": model, "prompt": prompt_ids, "max_tokens": N_TOKENS,
                                                       "temperature": 0, "logprobs": 1, "ignore_eos": True})
        self.assertEqual(status, 200, body)
        choice = json.loads(body)["choices"][0]
        return choice["logprobs"]["tokens"], choice["text"]

    def run_merged(self, model_dir, adapter, text):
        r = subprocess.run([ARGS.brioche, "run", "-m", model_dir, "--device", "cpu", "--adapter", adapter, "-p", text,
                            "--raw", "--temp", "0", "-n", str(N_TOKENS), "--ignore-eos", "-t", "2"],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout.rstrip("\n")

    def check_family(self, family):
        model_dir = os.path.join(ARGS.model, family, "moe")
        base_name = "moe"
        lora_dir = os.path.join(self.tmp, family)
        adapters = {"p": os.path.join(lora_dir, "p"), "q": os.path.join(lora_dir, "q")}
        shutil.copytree(os.path.join(ARGS.model, family, "lora", "moe_experts"), adapters["p"])
        write_second_adapter(family, model_dir, adapters["q"])
        text, prompt_ids = golden_prompt(family)
        want = {name: peft_greedy(family, model_dir, path, prompt_ids) for name, path in adapters.items()}
        want[base_name] = peft_greedy(family, model_dir, None, prompt_ids)
        merged_text = {name: self.run_merged(model_dir, path, text) for name, path in adapters.items()}

        server = Server(ARGS.brioche, model_dir, "--lora-dir", lora_dir, "--allow-runtime-lora",
                        "--lora", f"p={adapters['p']}", "--lora", f"q={adapters['q']}")
        try:
            alone = {name: self.complete(server, name, prompt_ids) for name in ("p", "q", base_name)}
            names = ["p", "q", base_name] * 2
            with concurrent.futures.ThreadPoolExecutor(len(names)) as pool:
                together = list(pool.map(lambda n: self.complete(server, n, prompt_ids), names))

            # Expert adapters for another model, loaded at run time: 400 naming the tensor, the server stays.
            errors = []
            for what in ("fewer", "wider"):
                named = broken_copy(adapters["p"], os.path.join(lora_dir, what), family, what)
                status, body = server.post("/v1/load_lora_adapter",
                                           {"lora_name": what, "lora_path": os.path.join(lora_dir, what)})
                message = json.loads(body).get("error", {}).get("message", body) if status != 200 else body
                errors.append((what, status, message, named))
            after = self.complete(server, "p", prompt_ids)
            self.assertTrue(server.alive())
        finally:
            server.stop()

        for name in ("p", "q", base_name):
            tokens, got_text = alone[name]
            print(f"{family} serve --lora {name}: tokens {tokens}; peft {want[name]}"
                  + (f"; run --adapter text {merged_text[name]!r}" if name in merged_text else ""))
            self.assertEqual(tokens, want[name], f"{family} {name} against peft")
            if name in merged_text:
                self.assertEqual(got_text, merged_text[name], f"{family} {name} against run --adapter (merged)")
        self.assertNotEqual(alone["p"][0], alone[base_name][0], "the adapter changes the answer")
        self.assertNotEqual(alone["q"][0], alone[base_name][0], "the second adapter changes the answer")
        self.assertNotEqual(alone["p"][0], alone["q"][0])
        for name, got in zip(names, together):
            self.assertEqual(got, alone[name], f"{family} {name} in the mixed batch")
        for what, status, message, named in errors:
            print(f"{family} load_lora_adapter ({what}): {status} {message}")
            self.assertEqual(status, 400, message)
            self.assertIn(f"'{named}'", message)
            self.assertNotIn("\n", message)
        self.assertEqual(after, alone["p"], "the server keeps serving after the refusals")

    def test_gemma4(self):
        self.check_family("gemma4")

    def test_qwen35(self):
        self.check_family("qwen35")


if __name__ == "__main__":
    sys.exit(e2e_main("moe_expert_lora_served_e2e", globals(),
                      needs=("torch", "transformers", "peft", "safetensors", "tokenizers")))
