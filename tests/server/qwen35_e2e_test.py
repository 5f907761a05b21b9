#!/usr/bin/env python3
"""Qwen 3.5 end to end: `brioche run` and `brioche serve` on the random-weight
fixtures of tools/oracle/qwen35_oracle.py (tests/fixtures/qwen35/{dense,moe}),
against transformers' greedy continuations recorded in their golden.json.

  - `brioche run --raw --temp 0` on a text prompt prints the text that
    transformers' greedy tokens decode to (dense and MoE);
  - `brioche serve`: /v1/completions with a text prompt and with the 50
    token ids whose 40-token greedy decode crosses the delta rule's 64-token
    chunk boundary gives transformers' text; concurrent requests (continuous
    batching, one recurrent-state slot each) give what each gives alone; a
    repeated prompt starts from the state snapshot kept at its last
    16-position block boundary (`cached_tokens`) with the same text as
    `brioche run` computes in full, and so does a next turn that extends it;
    requests with one system text and different user messages start from
    the snapshot at the last block boundary inside the system text
    (completions, and chat with one system message);
    chat completions answer through the fixture's template;
  - `serve --speculative prompt-lookup` proposes drafts (rolled out of the
    recurrent state when rejected) and answers with the text of a server
    without speculation; `--state-snapshots 0` turns hybrid prefix reuse
    off (and speculation is then refused, naming the flag).

Usage: qwen35_e2e_test.py --brioche build/cpu/brioche [--model tests/fixtures/qwen35]
Exits 77 (skipped) when the binary is missing.
"""
import concurrent.futures
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_process import Server, e2e_main, free_port  # noqa: E402

ARGS = None


def fixture(name):
    return os.path.join(ARGS.model, name)


def golden(name):
    with open(os.path.join(fixture(name), "golden.json")) as f:
        return json.load(f)


class RunCommand(unittest.TestCase):
    def test_run_prints_transformers_greedy_text(self):
        for name in ("dense", "moe"):
            for p in golden(name)["text_prompts"]:
                r = subprocess.run([ARGS.brioche, "run", "-m", fixture(name), "--device", "cpu", "-p", p["text"],
                                    "--raw", "--temp", "0", "-n", str(len(p["greedy"])), "--ignore-eos", "-t", "2"],
                                   capture_output=True, text=True, timeout=120)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(r.stdout.rstrip("\n"), p["greedy_text"], f"{name}: {p['text']!r}\n{r.stderr}")

    def test_speculation_gives_the_text_of_plain_decoding(self):
        # Prompt lookup on a repetitive prompt: drafts are proposed and
        # (on random weights) mostly rejected, so the state is rolled back
        # from its snapshot; the greedy text is that of `brioche run`.
        g = golden("dense")
        prompt = (g["long_ids"][:7] * 9)[:60]
        server = Server(ARGS.brioche, fixture("dense"), "--device", "cpu", "--speculative", "prompt-lookup")
        try:
            status, body = server.post("/v1/completions", {"prompt": prompt, "max_tokens": 24, "temperature": 0,
                                                           "ignore_eos": True})
            self.assertEqual(status, 200, body)
            text = json.loads(body)["choices"][0]["text"]
            status, metrics = server.get("/metrics")
            self.assertEqual(status, 200)
        finally:
            server.stop()
        drafts = [line for line in metrics.splitlines() if line.startswith("brioche_spec_draft_tokens_total")]
        self.assertTrue(drafts and float(drafts[0].split()[-1]) > 0, drafts)
        plain = Server(ARGS.brioche, fixture("dense"), "--device", "cpu")
        try:
            status, body = plain.post("/v1/completions", {"prompt": prompt, "max_tokens": 24, "temperature": 0,
                                                          "ignore_eos": True})
            self.assertEqual(status, 200, body)
            self.assertEqual(json.loads(body)["choices"][0]["text"], text)
        finally:
            plain.stop()


    def test_state_snapshots_flag(self):
        # --state-snapshots 0: no snapshot, so a repeated prompt computes
        # everything again; with --speculative it is refused with the flag's name.
        g = golden("dense")
        server = Server(ARGS.brioche, fixture("dense"), "--device", "cpu", "--state-snapshots", "0")
        try:
            for _ in range(2):
                status, body = server.post("/v1/completions", {"prompt": g["long_ids"][:90], "max_tokens": 2,
                                                               "temperature": 0})
                self.assertEqual(status, 200, body)
                self.assertEqual(json.loads(body)["usage"]["prompt_tokens_details"]["cached_tokens"], 0)
        finally:
            server.stop()
        r = subprocess.run([ARGS.brioche, "serve", "-m", fixture("dense"), "--port", str(free_port()),
                            "--state-snapshots", "0", "--speculative", "prompt-lookup"],
                           capture_output=True, text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("needs state snapshot slots (--state-snapshots", r.stderr)


class Serve(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server(ARGS.brioche, fixture("dense"), "--device", "cpu")

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def completion(self, prompt, n):
        status, body = self.server.post("/v1/completions", {"prompt": prompt, "max_tokens": n, "temperature": 0,
                                                            "ignore_eos": True})
        self.assertEqual(status, 200, body)
        reply = json.loads(body)
        return reply["choices"][0]["text"], reply["usage"]

    def test_text_prompt_gives_transformers_greedy_text(self):
        for p in golden("dense")["text_prompts"]:
            self.assertEqual(self.completion(p["text"], len(p["greedy"]))[0], p["greedy_text"])

    def test_token_ids_decode_across_a_chunk_boundary(self):
        g = golden("dense")
        self.assertEqual(self.completion(g["prompt_ids"], len(g["greedy_ids"]))[0], g["greedy_text"])

    def test_concurrent_requests_and_repeats_give_the_same_text(self):
        g = golden("dense")
        prompts = [g["long_ids"], g["short_ids"], g["prompt_ids"], g["long_ids"][:90], [5, 6, 7]]
        alone = [self.completion(p, 12)[0] for p in prompts]
        with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
            together = list(pool.map(lambda p: self.completion(p, 12)[0], prompts))
        self.assertEqual(together, alone)
        text, usage = self.completion(g["long_ids"], 12)
        self.assertEqual(text, alone[0])
        self.assertEqual(usage["prompt_tokens_details"]["cached_tokens"], 192)

    def text_completion(self, text, n):
        text_out, usage = self.completion(text, n)
        return text_out, usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"]

    def test_repeated_prompt_and_next_turn_reuse_the_state_snapshot(self):
        # A text no other test sends: the first request computes it all
        # and keeps the state at its last block boundary before its end.
        text = "Linear attention keeps a state of fixed size per head; full attention keeps every key. " * 6
        first, n_prompt, cached = self.text_completion(text, 12)
        self.assertEqual(cached, 0)
        kept = (n_prompt - 1) // 16 * 16
        self.assertGreater(kept, 0, n_prompt)
        again, _, cached = self.text_completion(text, 12)
        self.assertEqual((again, cached), (first, kept))
        # The next turn: the prompt, its answer and a new message.
        turn2 = text + first + " How are you today?"
        answer2, _, cached = self.text_completion(turn2, 8)
        self.assertEqual(cached, kept)
        # Computed in full by a fresh process (nothing to reuse): the same text.
        for prompt, n, want in ((text, 12, first), (turn2, 8, answer2)):
            r = subprocess.run([ARGS.brioche, "run", "-m", fixture("dense"), "--device", "cpu", "-p", prompt, "--raw",
                                "--temp", "0", "-n", str(n), "--ignore-eos", "-t", "2"],
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout.rstrip("\n"), want.rstrip("\n"))

    def test_shared_system_prompt_is_reused_by_different_user_messages(self):
        # A system text of more than three blocks, no other test sends it;
        # the first request keeps a state snapshot at every block boundary
        # its prompt crosses, so the others start from the last one inside
        # the shared text, whatever follows it.
        system = "You are a terse assistant for a hybrid-attention test; answer in one line. " * 3
        _, n_system, _ = self.text_completion(system, 1)
        users = ("Q: What keeps a fixed-size state?", "Q: Name a gated layer.", "Q: Why split chunks at 16?")
        texts = []
        for i, user in enumerate(users):
            text, n_prompt, cached = self.text_completion(system + user, 10)
            texts.append(text)
            self.assertGreater(n_prompt, n_system)
            # The boundary below the system text's last token (which may
            # merge with the user text's first), 48 or more.
            self.assertEqual(cached, (n_system - 1) // 16 * 16, (i, n_system, n_prompt))
            self.assertGreaterEqual(cached, 48)
        # Computed in full by a fresh process: the same text.
        for user, want in zip(users, texts):
            r = subprocess.run([ARGS.brioche, "run", "-m", fixture("dense"), "--device", "cpu", "-p", system + user,
                                "--raw", "--temp", "0", "-n", "10", "--ignore-eos", "-t", "2"],
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout.rstrip("\n"), want.rstrip("\n"))
        # Chat: the same system message with different user messages.
        cached = []
        for user in users:
            status, body = self.server.post("/v1/chat/completions", {
                "messages": [{"role": "system", "content": system + " (chat)"}, {"role": "user", "content": user}],
                "max_tokens": 4, "temperature": 0})
            self.assertEqual(status, 200, body)
            cached.append(json.loads(body)["usage"]["prompt_tokens_details"]["cached_tokens"])
        self.assertEqual(cached[0], 0)
        self.assertGreaterEqual(min(cached[1:]), 48, cached)

    def test_chat_completion_answers(self):
        status, body = self.server.post("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Hello, world!"}], "max_tokens": 6, "temperature": 0})
        self.assertEqual(status, 200, body)
        reply = json.loads(body)
        self.assertEqual(reply["choices"][0]["message"]["role"], "assistant")
        self.assertGreater(reply["usage"]["completion_tokens"], 0)

    def test_bad_request_keeps_serving(self):
        status, body = self.server.post("/v1/completions", {"prompt": [5, 100000], "max_tokens": 2})
        self.assertEqual(status, 400, body)
        self.assertTrue(self.server.alive())


if __name__ == "__main__":
    sys.exit(e2e_main("qwen35_e2e", globals()))
