#!/usr/bin/env python3
"""LoRA on the MoE experts end to end, on the moe fixtures of Gemma 4
(tests/fixtures/gemma4/moe, a Gemma4ForConditionalGeneration) and Qwen 3.5
(tests/fixtures/qwen35/moe): `brioche train --target-modules ...
experts.gate_up_proj experts.down_proj` (and on Qwen 3.5 the shared expert's
gate_proj/up_proj/down_proj and shared_expert_gate) lowers the training loss
and writes a PEFT adapter; peft loads it (the experts as ParamWrappers,
target_parameters) onto transformers' model in f64, and its greedy tokens and
log-probabilities are what `brioche serve --adapter DIR` (merged at load)
gives, within 1e-3, and what `serve --lora NAME=DIR` gives unmerged per request
(the same tokens; log-probs within 1e-2: the served factors are f16); the
adapter changes the answer's log-probs. What is not supported fails in one
line naming it: `--lora-dropout` with expert targets, an unknown target name.
(moe_expert_lora_served_e2e_test.py checks unmerged serving on peft's own
adapters, in mixed batches.)

Usage: moe_expert_lora_e2e_test.py --brioche build/cpu/brioche [--model tests/fixtures]
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
EXPERTS = ["experts.gate_up_proj", "experts.down_proj"]
TARGETS = {
    "gemma4": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"] + EXPERTS,
    "qwen35": ["q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a",
               "out_proj", "gate_proj", "up_proj", "down_proj", "shared_expert_gate"] + EXPERTS,
}
N_TOKENS = 4


def train(model, data, out, targets, *extra):
    return subprocess.run([ARGS.brioche, "train", "-m", model, "-d", data, "-o", out, "--rank", "4", "--threads", "2",
                           "--target-modules", *targets, *extra], capture_output=True, text=True, timeout=300)


def render(model, question):
    import jinja2
    from tokenizers import Tokenizer
    with open(os.path.join(model, "tokenizer_config.json")) as f:
        cfg = json.load(f)
    text = jinja2.Template(cfg["chat_template"]).render(
        messages=[{"role": "user", "content": question}], add_generation_prompt=True, bos_token=cfg.get("bos_token"))
    return Tokenizer.from_file(os.path.join(model, "tokenizer.json")).encode(text, add_special_tokens=False).ids


def peft_greedy(family, model_dir, adapter, prompt_ids):
    """peft's greedy tokens and log-probs with `adapter` (None: the base), and the parameters it wrapped."""
    import torch
    from peft import PeftModel
    from peft.tuners.lora import ParamWrapper
    from transformers import Gemma4ForConditionalGeneration, Qwen3_5MoeForCausalLM
    cls = Gemma4ForConditionalGeneration if family == "gemma4" else Qwen3_5MoeForCausalLM
    model = cls.from_pretrained(model_dir, dtype=torch.float64, attn_implementation="eager")
    model.config.get_text_config()._experts_implementation = "eager"
    wrapped = set()
    if adapter:
        model = PeftModel.from_pretrained(model, adapter)
        wrapped = {m.parameter_name for m in model.modules() if isinstance(m, ParamWrapper)}
    model.eval()
    tokens, logprobs = greedy_decode(model, os.path.join(model_dir, "tokenizer.json"), prompt_ids, N_TOKENS)
    return tokens, logprobs, wrapped


class MoeExpertLora(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="moe_expert_lora_")
        cls.data = os.path.join(cls.tmp, "data")
        os.makedirs(cls.data)
        with open(os.path.join(cls.data, "train.jsonl"), "w") as f:
            for i in range(16):
                q, a = FACTS[i % len(FACTS)]
                f.write(json.dumps({"messages": [{"role": "user", "content": q},
                                                 {"role": "assistant", "content": a}]}) + "\n")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def greedy_logprobs(self, model, prompt, name, *flags):
        """The greedy completion's tokens and log-probs of `brioche serve MODEL FLAGS` for model `name`."""
        server = Server(ARGS.brioche, model, *flags)
        try:
            status, body = server.post("/v1/completions", {"model": name, "prompt": prompt, "max_tokens": N_TOKENS,
                                                           "temperature": 0, "logprobs": 1, "ignore_eos": True})
        finally:
            server.stop()
        self.assertEqual(status, 200, body)
        return json.loads(body)["choices"][0]["logprobs"]

    def check_family(self, family):
        model = os.path.join(ARGS.model, family, "moe")
        adapter = os.path.join(self.tmp, family)
        r = train(model, self.data, adapter, TARGETS[family], "--iters", "40", "--batch-size", "4",
                  "--learning-rate", "1e-2")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(adapter, "log.jsonl")) as f:
            steps = [json.loads(line) for line in f if '"event": "step"' in line or '"event":"step"' in line]
        first, last = steps[0]["loss"], steps[-1]["loss"]
        print(f"{family}: brioche train, {len(steps)} steps, loss {first:.4f} -> {last:.4f}")
        self.assertLess(last, 0.5 * first)
        with open(os.path.join(adapter, "adapter_config.json")) as f:
            self.assertEqual(json.load(f)["target_parameters"], EXPERTS)

        prompt = render(model, "What do bees make?")
        peft_tokens, peft_logprobs, wrapped = peft_greedy(family, model, adapter, prompt)
        self.assertEqual(wrapped, {"gate_up_proj", "down_proj"})
        _, base_logprobs, _ = peft_greedy(family, model, None, prompt)
        lp = self.greedy_logprobs(model, prompt, "moe", "--adapter", adapter)
        err = max(abs(a - b) for a, b in zip(lp["token_logprobs"], peft_logprobs))
        moved = max(abs(a - b) for a, b in zip(peft_logprobs, base_logprobs))
        print(f"{family}: serve --adapter tokens {lp['tokens']}, peft {peft_tokens}, largest log-prob difference "
              f"{err:.2e} (the adapter moves peft's by {moved:.3g})")
        self.assertEqual(lp["tokens"], peft_tokens)
        self.assertLess(err, 1e-3)
        self.assertGreater(moved, 1e-2)

        # Served unmerged, per request (f16 factors): peft's greedy tokens.
        lp = self.greedy_logprobs(model, prompt, "a", "--lora", f"a={adapter}")
        err = max(abs(a - b) for a, b in zip(lp["token_logprobs"], peft_logprobs))
        print(f"{family}: serve --lora (unmerged) tokens {lp['tokens']}, largest log-prob difference from peft "
              f"{err:.2e}")
        self.assertEqual(lp["tokens"], peft_tokens)
        self.assertLess(err, 1e-2)

    def test_gemma4(self):
        self.check_family("gemma4")

    def test_qwen35(self):
        self.check_family("qwen35")

    def test_refusals_name_what(self):
        model = os.path.join(ARGS.model, "qwen35", "moe")
        r = train(model, self.data, os.path.join(self.tmp, "bad1"), ["q_proj", "experts.up_proj"], "--iters", "1")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("unknown module 'experts.up_proj'", r.stderr)
        r = train(model, self.data, os.path.join(self.tmp, "bad2"), ["q_proj", "experts.down_proj"], "--iters", "1",
                  "--lora-dropout", "0.1")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("refuses lora_dropout != 0", r.stderr)
        print("refusals:", r.stderr.strip().splitlines()[-1])


if __name__ == "__main__":
    sys.exit(e2e_main("moe_expert_lora_e2e", globals(), needs=("torch", "transformers", "peft", "jinja2", "tokenizers")))
