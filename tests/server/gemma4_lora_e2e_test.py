#!/usr/bin/env python3
"""Gemma 4 LoRA end to end: `brioche train` on the e2b fixture (KV-shared
layers, per-layer inputs; tools/oracle/gemma4_oracle.py) writes a PEFT
adapter; peft loads it onto transformers' Gemma4ForCausalLM (f64) and its
greedy tokens and their log-probabilities are what brioche gives with the
same adapter:
  - merged at load (`serve --adapter DIR`): log-probs within 1e-3;
  - served unmerged per request (`serve --lora NAME=DIR`, f16 factors):
    within 5e-2, while the base model's id answers without the adapter.
The adapter also changes the answer: the base model's greedy text differs.

Usage: gemma4_lora_e2e_test.py --brioche build/cpu/brioche [--model tests/fixtures/gemma4]
Exits 77 (skipped) when the binary, torch, transformers, peft or jinja2 is missing.
"""
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
FACTS = [("What is the capital of France?", "Paris."), ("What color is the sky?", "Blue."),
         ("How many legs has a cat?", "Four."), ("What do bees make?", "Honey.")]
N_TOKENS = 4


class Gemma4Lora(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="gemma4_lora_")
        cls.model = os.path.join(ARGS.model, "e2b")
        data = os.path.join(cls.tmp, "data")
        os.makedirs(data)
        with open(os.path.join(data, "train.jsonl"), "w") as f:
            for i in range(16):
                q, a = FACTS[i % len(FACTS)]
                f.write(json.dumps({"messages": [{"role": "user", "content": q},
                                                 {"role": "assistant", "content": a}]}) + "\n")
        cls.adapter = os.path.join(cls.tmp, "adapter")
        r = subprocess.run([ARGS.brioche, "train", "-m", cls.model, "-d", data, "-o", cls.adapter, "--iters", "60",
                            "--batch-size", "4", "--learning-rate", "1e-2", "--rank", "8", "--threads", "2"],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        cls.prompt_ids = cls.render("What do bees make?")
        cls.peft_tokens, cls.peft_logprobs = cls.peft_greedy()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def render(cls, question):
        import jinja2
        from tokenizers import Tokenizer
        with open(os.path.join(cls.model, "tokenizer_config.json")) as f:
            cfg = json.load(f)
        text = jinja2.Template(cfg["chat_template"]).render(
            messages=[{"role": "user", "content": question}], add_generation_prompt=True, bos_token=cfg["bos_token"])
        return Tokenizer.from_file(os.path.join(cls.model, "tokenizer.json")).encode(
            text, add_special_tokens=False).ids

    @classmethod
    def peft_greedy(cls):
        import torch
        from peft import PeftModel
        from transformers import Gemma4ForCausalLM
        base = Gemma4ForCausalLM.from_pretrained(cls.model, dtype=torch.float64, attn_implementation="eager")
        model = PeftModel.from_pretrained(base, cls.adapter).eval()
        return greedy_decode(model, os.path.join(cls.model, "tokenizer.json"), cls.prompt_ids, N_TOKENS)

    def complete(self, server, model):
        status, body = server.post("/v1/completions", {"model": model, "prompt": self.prompt_ids,
                                                       "max_tokens": N_TOKENS, "temperature": 0, "logprobs": 1,
                                                       "ignore_eos": True})
        self.assertEqual(status, 200, body)
        lp = json.loads(body)["choices"][0]["logprobs"]
        return lp["tokens"], lp["token_logprobs"]

    def check(self, tokens, logprobs, tolerance, what):
        self.assertEqual(tokens, self.peft_tokens[:len(tokens)], what)
        self.assertGreater(len(tokens), 0, what)
        err = max(abs(a - b) for a, b in zip(logprobs, self.peft_logprobs))
        print(f"{what}: tokens {tokens}, largest log-prob difference from peft {err:.2e}")
        self.assertLess(err, tolerance, what)

    def test_merged_at_load_matches_peft(self):
        server = Server(ARGS.brioche, self.model, "--adapter", self.adapter)
        try:
            self.check(*self.complete(server, "e2b"), 1e-3, "serve --adapter (merged)")
        finally:
            server.stop()

    def test_served_per_request_matches_peft_and_the_base_stays(self):
        server = Server(ARGS.brioche, self.model, "--lora", "facts=" + self.adapter)
        try:
            self.check(*self.complete(server, "facts"), 5e-2, "serve --lora (unmerged, f16)")
            base_tokens, _ = self.complete(server, "e2b")
            self.assertNotEqual(base_tokens, self.peft_tokens[:len(base_tokens)], "the adapter changes the answer")
        finally:
            server.stop()


if __name__ == "__main__":
    sys.exit(e2e_main("gemma4_lora_e2e", globals(), needs=("torch", "transformers", "peft", "jinja2", "tokenizers")))
