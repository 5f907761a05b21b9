#!/usr/bin/env python3
"""Gemma 4 end to end: `brioche run` and `brioche serve` on the random-weight
fixtures of tools/oracle/gemma4_oracle.py, against transformers' greedy
continuations (tests/fixtures/gemma4/goldens/<name>.json).

  - `brioche run --raw --temp 0` on a text prompt prints the text that
    transformers' greedy tokens decode to (the fixture's own tokenizer);
  - `brioche serve`: /v1/completions with a text prompt and with a prompt of
    token ids (past the sliding window) gives the same continuation;
    /v1/chat/completions renders the fixture's chat template and answers;
  - a multimodal checkpoint (Gemma4ForConditionalGeneration) says in one
    line that only its text model is loaded.

Usage: gemma4_e2e_test.py --brioche build/cpu/brioche [--model tests/fixtures/gemma4]
Exits 77 (skipped) when the binary is missing.
"""
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_process import Server, e2e_main  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "gemma4")
ARGS = None


def golden(name):
    with open(os.path.join(FIXTURES, "goldens", name + ".json")) as f:
        return json.load(f)


def run_cli(fixture, prompt, n):
    return subprocess.run([ARGS.brioche, "run", "-m", os.path.join(FIXTURES, fixture), "--device", "cpu",
                           "-p", prompt, "--raw", "--temp", "0", "-n", str(n), "-t", "2"],
                          capture_output=True, text=True, timeout=120)


class RunCommand(unittest.TestCase):
    def test_run_prints_transformers_greedy_text(self):
        for fixture in ("e2b", "mix"):
            for p in golden(fixture)["text_prompts"]:
                r = run_cli(fixture, p["text"], len(p["greedy"]))
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(r.stdout.rstrip("\n"), p["greedy_text"], f"{fixture}: {p['text']!r}\n{r.stderr}")

    def test_multimodal_checkpoint_says_it_loads_the_text_model(self):
        p = golden("moe")["text_prompts"][0]
        r = run_cli("moe", p["text"], len(p["greedy"]))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.rstrip("\n"), p["greedy_text"])
        lines = [line for line in r.stderr.splitlines() if "multimodal" in line]
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn("text model", lines[0])

    def test_cuda_runs_or_says_why_not_in_one_line(self):
        r = subprocess.run([ARGS.brioche, "run", "-m", os.path.join(FIXTURES, "mix"), "--device", "cuda", "-p", "hi",
                            "-n", "1"], capture_output=True, text=True, timeout=60)
        if r.returncode == 0:  # a CUDA build on a machine with a GPU
            self.assertNotEqual(r.stdout, "", r.stderr)
        else:  # a CPU build, or no device
            self.assertIn("cuda", r.stderr.lower(), r.stderr)


class Serve(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server(ARGS.brioche, os.path.join(FIXTURES, "e2b"), "--device", "cpu")

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def completion(self, prompt, n):
        status, body = self.server.post("/v1/completions", {"model": "e2b", "prompt": prompt, "max_tokens": n,
                                                            "temperature": 0})
        self.assertEqual(status, 200, body)
        return json.loads(body)["choices"][0]["text"]

    def test_text_prompt_gives_transformers_greedy_text(self):
        for p in golden("e2b")["text_prompts"]:
            self.assertEqual(self.completion(p["text"], len(p["greedy"])), p["greedy_text"])

    def test_token_id_prompt_past_the_sliding_window(self):
        g = golden("e2b")
        text_of = {}
        with open(os.path.join(FIXTURES, "e2b", "tokenizer.json")) as f:
            vocab = json.load(f)["model"]["vocab"]
        for token, i in vocab.items():
            text_of[i] = token.replace("\u0120", " ").replace("\u010a", "\n")
        p = g["prompts"][-1]  # 37 ids, sliding_window 6
        # Up to the first near-tie (either token may win there).
        n = next((i for i, m in enumerate(p["top2_margins"]) if m < 1e-3), len(p["greedy"]))
        self.assertGreaterEqual(n, 4)
        want = "".join(text_of[t] for t in p["greedy"][:n] if t >= 6)
        self.assertEqual(self.completion(p["ids"], n), want)

    def test_prefix_cache_and_concurrent_requests_give_the_same_text(self):
        # The second request reuses the first's cached prefix blocks (KV-shared
        # layers keep none of their own); concurrent ones share decode steps.
        import concurrent.futures
        p = golden("e2b")["prompts"][-1]
        n = next((i for i, m in enumerate(p["top2_margins"]) if m < 1e-3), len(p["greedy"]))
        first = self.completion(p["ids"], n)
        self.assertEqual(self.completion(p["ids"], n), first)
        prompts = [p["ids"], p["ids"][:30], p["ids"], golden("e2b")["prompts"][1]["ids"]]
        alone = [self.completion(q, 4) for q in prompts]
        with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
            together = list(pool.map(lambda q: self.completion(q, 4), prompts))
        self.assertEqual(together, alone)
        _, metrics = self.server.get("/metrics")
        hits = [line for line in metrics.splitlines() if line.startswith("brioche_prefix_cache_hit_blocks_total ")]
        self.assertEqual(len(hits), 1, metrics)
        self.assertGreater(float(hits[0].split()[1]), 0)

    def test_chat_completion_answers(self):
        status, body = self.server.post("/v1/chat/completions", {
            "model": "e2b", "messages": [{"role": "user", "content": "Hello, world!"}], "max_tokens": 6,
            "temperature": 0})
        self.assertEqual(status, 200, body)
        reply = json.loads(body)
        self.assertEqual(reply["choices"][0]["message"]["role"], "assistant")
        self.assertGreater(reply["usage"]["completion_tokens"], 0)

    def test_bad_request_keeps_serving(self):
        status, body = self.server.post("/v1/completions", {"model": "e2b", "prompt": [5, 100000], "max_tokens": 2})
        self.assertEqual(status, 400, body)
        self.assertTrue(self.server.alive())


class WindowPoolFlag(unittest.TestCase):
    """`serve --kv-window-blocks`: the sliding layers' pool as the user sizes it."""

    def window_blocks_served(self, *flag):
        server = Server(ARGS.brioche, os.path.join(FIXTURES, "e2b"), "--device", "cpu", "--kv-mb", "4", *flag)
        try:
            p = golden("e2b")["text_prompts"][0]
            status, body = server.post("/v1/completions", {"model": "e2b", "prompt": p["text"],
                                                           "max_tokens": len(p["greedy"]), "temperature": 0})
            self.assertEqual(status, 200, body)
            self.assertEqual(json.loads(body)["choices"][0]["text"], p["greedy_text"])
            _, metrics = server.get("/metrics")
            total = [line for line in metrics.splitlines() if line.startswith("brioche_kv_window_blocks_total ")]
            self.assertEqual(len(total), 1, metrics)
            return int(float(total[0].split()[1]))
        finally:
            server.stop()

    def test_explicit_auto_and_no_pool(self):
        self.assertEqual(self.window_blocks_served("--kv-window-blocks", "40"), 40)
        self.assertEqual(self.window_blocks_served("--kv-window-blocks", "0"), 0)
        self.assertGreater(self.window_blocks_served(), 0)

    def test_a_pool_too_small_for_one_window_is_refused_with_the_least_it_needs(self):
        with self.assertRaises(RuntimeError) as refused:
            Server(ARGS.brioche, os.path.join(FIXTURES, "e2b"), "--device", "cpu", "--kv-window-blocks", "1")
        self.assertIn("window pool of 1 blocks cannot hold one sequence's sliding window", str(refused.exception))
        self.assertIn("at least", str(refused.exception))


if __name__ == "__main__":
    sys.exit(e2e_main("gemma4_e2e", globals()))
