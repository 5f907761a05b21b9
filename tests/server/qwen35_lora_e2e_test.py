#!/usr/bin/env python3
"""Qwen 3.5 LoRA end to end: `brioche train` on the dense fixture
(tools/oracle/qwen35_oracle.py: Gated DeltaNet and gated-attention layers)
with LoRA on q/k/v/o, gate/up/down and the linear-attention projections
in_proj_qkv/in_proj_z/in_proj_b/in_proj_a/out_proj writes a PEFT adapter;
peft loads it onto transformers' Qwen3_5ForCausalLM (f64) and its greedy
tokens and their log-probabilities are what `brioche serve --adapter DIR`
(the adapter merged at load) gives, within 1e-3. The adapter changes the
answer (the base model's greedy text differs). The same on the moe fixture
(Qwen3_5MoeForCausalLM; LoRA on the attention and DeltaNet projections, the
MoE block frozen). Served unmerged (`serve --lora NAME=DIR`, the request's
`model` naming it), each adapter gives the merged server's greedy tokens
(log-probs within 1e-3: the served factors are f16) and the seeded sampled
ones, alone and in a batch of six concurrent requests over two adapters and
the base (on the moe fixture too). DPO and ORPO train on the dense model
(the loss falls); ORPO with --prefix-shared logs the plain layout's losses.

Usage: qwen35_lora_e2e_test.py --brioche build/cpu/brioche [--model tests/fixtures/qwen35]
Exits 77 (skipped) when the binary, torch, transformers, peft or jinja2 is missing.
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
FACTS = [("What is the capital of France?", "Paris."), ("What color is the sky?", "Blue."),
         ("How many legs has a cat?", "Four."), ("What do bees make?", "Honey.")]
ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj"]
TARGETS = ATTENTION + ["gate_proj", "up_proj", "down_proj"]
N_TOKENS = 4


class Qwen35Lora(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="qwen35_lora_")
        cls.model = os.path.join(ARGS.model, "dense")
        cls.data = os.path.join(cls.tmp, "data")
        os.makedirs(cls.data)
        with open(os.path.join(cls.data, "train.jsonl"), "w") as f:
            for i in range(16):
                q, a = FACTS[i % len(FACTS)]
                f.write(json.dumps({"messages": [{"role": "user", "content": q},
                                                 {"role": "assistant", "content": a}]}) + "\n")
        cls.adapter = os.path.join(cls.tmp, "adapter")
        r = cls.train(cls.data, cls.adapter, "--iters", "60", "--batch-size", "4", "--learning-rate", "1e-2")
        assert r.returncode == 0, r.stderr
        cls.prompt_ids = cls.render("What do bees make?")
        cls.peft_tokens, cls.peft_logprobs = cls.peft_greedy(cls.model, cls.adapter, TARGETS)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def train(cls, data, out, *extra, model=None, targets=TARGETS):
        return subprocess.run([ARGS.brioche, "train", "-m", model or cls.model, "-d", data, "-o", out, "--rank", "8",
                               "--threads", "2", "--target-modules", *targets, *extra],
                              capture_output=True, text=True, timeout=300)

    @classmethod
    def render(cls, question):
        import jinja2
        from tokenizers import Tokenizer
        with open(os.path.join(cls.model, "tokenizer_config.json")) as f:
            cfg = json.load(f)
        text = jinja2.Template(cfg["chat_template"]).render(
            messages=[{"role": "user", "content": question}], add_generation_prompt=True)
        return Tokenizer.from_file(os.path.join(cls.model, "tokenizer.json")).encode(
            text, add_special_tokens=False).ids

    @classmethod
    def peft_greedy(cls, model_dir, adapter, targets):
        import torch
        from peft import PeftModel
        from transformers import Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM
        model_cls = Qwen3_5MoeForCausalLM if model_dir.endswith("moe") else Qwen3_5ForCausalLM
        base = model_cls.from_pretrained(model_dir, dtype=torch.float64, attn_implementation="eager")
        base.config._experts_implementation = "eager"
        model = PeftModel.from_pretrained(base, adapter).eval()
        adapted = {n.split(".")[-2] for n, _ in model.named_modules() if n.endswith(".lora_A")}
        assert adapted == set(targets), f"peft adapted {sorted(adapted)}"
        return greedy_decode(model, os.path.join(model_dir, "tokenizer.json"), cls.prompt_ids, N_TOKENS)

    def complete(self, server, model="dense", seed=None):
        body = {"model": model, "prompt": self.prompt_ids, "max_tokens": N_TOKENS, "temperature": 0, "logprobs": 1,
                "ignore_eos": True}
        if seed is not None:
            body.update({"temperature": 1.0, "seed": seed})
        status, body = server.post("/v1/completions", body)
        self.assertEqual(status, 200, body)
        lp = json.loads(body)["choices"][0]["logprobs"]
        return lp["tokens"], lp["token_logprobs"]

    def merged_answers(self, model_dir, adapter):
        """Greedy (tokens, logprobs) and seeded tokens of a server with `adapter` merged at load."""
        server = Server(ARGS.brioche, model_dir, "--adapter", adapter)
        try:
            return self.complete(server, os.path.basename(model_dir)), self.complete(
                server, os.path.basename(model_dir), seed=7)[0]
        finally:
            server.stop()

    def assert_served_unmerged(self, model_dir, adapters):
        """adapters: name -> folder. Each served unmerged (alone, then in a batch of six over the adapters and the
        base) gives its merged server's greedy tokens, log-probs within 1e-3 and seeded tokens."""
        base = os.path.basename(model_dir)
        merged = {name: self.merged_answers(model_dir, path) for name, path in adapters.items()}
        args = [a for name, path in adapters.items() for a in ("--lora", f"{name}={path}")]
        server = Server(ARGS.brioche, model_dir, *args)
        try:
            alone = {name: (self.complete(server, name), self.complete(server, name, seed=7)[0])
                     for name in [*adapters, base]}
            names = [*adapters, base] * (6 // (len(adapters) + 1))
            with concurrent.futures.ThreadPoolExecutor(len(names)) as pool:
                together = list(pool.map(lambda n: (self.complete(server, n), self.complete(server, n, seed=7)[0]),
                                         names))
        finally:
            server.stop()
        for name in adapters:
            (tokens, logprobs), seeded = alone[name]
            (want_tokens, want_logprobs), want_seeded = merged[name]
            err = max(abs(a - b) for a, b in zip(logprobs, want_logprobs))
            print(f"{base} serve --lora {name} (unmerged): tokens {tokens}, seeded {seeded}, largest log-prob "
                  f"difference from --adapter (merged) {err:.2e}")
            self.assertEqual(tokens, want_tokens, name)
            self.assertEqual(seeded, want_seeded, name)
            self.assertLess(err, 1e-3, name)
            self.assertNotEqual(tokens, alone[base][0][0], f"adapter {name} changes the answer")
        for name, got in zip(names, together):
            self.assertEqual(got[0][0], alone[name][0][0], f"{name} in the batch")
            self.assertEqual(got[1], alone[name][1], f"{name} seeded in the batch")
            for a, b in zip(got[0][1], alone[name][0][1]):
                self.assertAlmostEqual(a, b, delta=1e-4, msg=f"{name} in the batch")

    def test_merged_at_load_matches_peft_and_changes_the_answer(self):
        server = Server(ARGS.brioche, self.model, "--adapter", self.adapter)
        try:
            tokens, logprobs = self.complete(server)
        finally:
            server.stop()
        self.assertEqual(tokens, self.peft_tokens)
        err = max(abs(a - b) for a, b in zip(logprobs, self.peft_logprobs))
        print(f"serve --adapter (merged): tokens {tokens}, largest log-prob difference from peft {err:.2e}")
        self.assertLess(err, 1e-3)
        server = Server(ARGS.brioche, self.model)
        try:
            base_tokens, _ = self.complete(server)
        finally:
            server.stop()
        self.assertNotEqual(base_tokens, tokens, "the adapter changes the answer")

    def test_served_unmerged_equals_merged_alone_and_batched(self):
        # A second adapter on other targets (attention and the DeltaNet's z and out projections), rank 8.
        adapter_b = os.path.join(self.tmp, "adapter_b")
        r = self.train(self.data, adapter_b, "--iters", "30", "--batch-size", "4", "--learning-rate", "1e-2",
                       targets=["q_proj", "o_proj", "in_proj_z", "out_proj", "down_proj"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_served_unmerged(self.model, {"a": self.adapter, "b": adapter_b})
        # The trained adapter served unmerged gives peft's greedy answer too.
        server = Server(ARGS.brioche, self.model, "--lora", f"a={self.adapter}")
        try:
            tokens, logprobs = self.complete(server, "a")
        finally:
            server.stop()
        self.assertEqual(tokens, self.peft_tokens)
        err = max(abs(a - b) for a, b in zip(logprobs, self.peft_logprobs))
        print(f"serve --lora (unmerged): largest log-prob difference from peft {err:.2e}")
        self.assertLess(err, 1e-3)

    def test_moe_adapter_merged_at_load_matches_peft(self):
        moe = os.path.join(ARGS.model, "moe")
        adapter = os.path.join(self.tmp, "moe_adapter")
        r = self.train(self.data, adapter, "--iters", "60", "--batch-size", "4", "--learning-rate", "1e-2", model=moe,
                       targets=ATTENTION)
        self.assertEqual(r.returncode, 0, r.stderr)
        peft_tokens, peft_logprobs = self.peft_greedy(moe, adapter, ATTENTION)
        server = Server(ARGS.brioche, moe, "--adapter", adapter)
        try:
            tokens, logprobs = self.complete(server, "moe")
        finally:
            server.stop()
        self.assertEqual(tokens, peft_tokens)
        err = max(abs(a - b) for a, b in zip(logprobs, peft_logprobs))
        print(f"moe serve --adapter (merged): tokens {tokens}, largest log-prob difference from peft {err:.2e}")
        self.assertLess(err, 1e-3)
        self.assert_served_unmerged(moe, {"m": adapter})

    def test_preference_methods_train(self):
        data = os.path.join(self.tmp, "pairs")
        os.makedirs(data, exist_ok=True)
        with open(os.path.join(data, "train.jsonl"), "w") as f:
            for i in range(8):
                q, a = FACTS[i % len(FACTS)]
                f.write(json.dumps({"prompt": [{"role": "user", "content": q}],
                                    "chosen": [{"role": "assistant", "content": a}],
                                    "rejected": [{"role": "assistant", "content": "I do not know."}]}) + "\n")
        for method in ("dpo", "orpo"):
            out = os.path.join(self.tmp, method)
            r = self.train(data, out, "--method", method, "--iters", "20", "--batch-size", "4", "--learning-rate",
                           "1e-2")
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(out, "log.jsonl")) as f:
                losses = [row["loss"] for row in map(json.loads, f) if row.get("event") == "step"]
            self.assertGreater(len(losses), 1, method)
            print(f"{method}: loss {losses[0]:.4f} -> {losses[-1]:.4f} over {len(losses)} logged steps")
            self.assertLess(losses[-1], losses[0], method)
        # --prefix-shared: each prompt runs once and both replies continue its state; the same steps' losses.
        losses = {}
        for name, extra in (("plain", ()), ("shared", ("--prefix-shared",))):
            out = os.path.join(self.tmp, "orpo_" + name)
            r = self.train(data, out, "--method", "orpo", "--iters", "3", "--batch-size", "4", "--learning-rate",
                           "1e-2", *extra)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(out, "log.jsonl")) as f:
                losses[name] = [row["loss"] for row in map(json.loads, f) if row.get("event") == "step"]
        print(f"orpo plain {losses['plain']}, prefix-shared {losses['shared']}")
        self.assertEqual(len(losses["plain"]), len(losses["shared"]))
        for a, b in zip(losses["plain"], losses["shared"]):
            self.assertLess(abs(a - b), 1e-4 * max(1.0, abs(a)))


if __name__ == "__main__":
    sys.exit(e2e_main("qwen35_lora_e2e", globals(), needs=("torch", "transformers", "peft", "jinja2", "tokenizers")))
