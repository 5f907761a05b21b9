#!/usr/bin/env python3
"""Speculative decoding (prompt lookup, and a draft model) through `brioche serve`, end to end.

One server with `--speculative prompt-lookup`: an extraction prompt (the
reply copies sentences from it) gives the same greedy reply, streamed and
not, as the same request with "speculative": false; /metrics counts the
drafts of the first and none of the opted-out one, with acceptance > 0;
a JSON-schema response is the same both ways; a non-boolean field is a 400
naming it. Then the same with `--draft-model`.

Run: python3 tests/server/speculative_e2e_test.py --brioche build/cpu/brioche [--model PATH]
Exits 77 (CTest: skipped) when the model or the binary is missing.
"""
import json
import os
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_process import Server, e2e_main  # noqa: E402

ARGS = None
HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "..", "..", "bench", "speculative", "extract.txt")) as f:
    EXTRACT = f.read()


def settled_metric(server, name):
    """The counter once the engine is idle: /metrics reads the stats of the
    engine's last finished step, and a reply can arrive before its step's
    stats are in. Read until two reads 0.1 s apart agree."""
    last = metric(server, name)
    for _ in range(50):
        time.sleep(0.1)
        now = metric(server, name)
        if now == last:
            return now
        last = now
    return last


def metric(server, name):
    status, body = server.get("/metrics")
    assert status == 200, body
    for line in body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


class SpeculativeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server(ARGS.brioche, ARGS.model, "--speculative", "prompt-lookup", "--spec-tokens", "4", threads=2)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def chat(self, **extra):
        body = {"messages": [{"role": "user", "content": EXTRACT}], "temperature": 0, "max_tokens": 80, **extra}
        status, text = self.server.post("/v1/chat/completions", body)
        self.assertEqual(status, 200, text)
        return json.loads(text)["choices"][0]["message"]["content"]

    def test_same_reply_with_and_without_and_metrics_count_drafts(self):
        steps0 = metric(self.server, "brioche_spec_verify_steps_total")
        with_spec = self.chat()
        steps1 = settled_metric(self.server, "brioche_spec_verify_steps_total")
        self.assertGreater(steps1, steps0, "the speculative request verified no drafts")
        self.assertGreater(metric(self.server, "brioche_spec_accepted_tokens_total"), 0)
        rate = metric(self.server, "brioche_spec_acceptance_rate")
        self.assertTrue(0 < rate <= 1, rate)
        without = self.chat(speculative=False)
        self.assertEqual(settled_metric(self.server, "brioche_spec_verify_steps_total"), steps1,
                         "the opted-out request speculated")
        self.assertEqual(with_spec, without)
        # Streamed: the deltas add up to the same text.
        status, text = self.server.post("/v1/chat/completions", {
            "messages": [{"role": "user", "content": EXTRACT}], "temperature": 0, "max_tokens": 80, "stream": True})
        self.assertEqual(status, 200, text)
        streamed = ""
        for line in text.splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                for choice in json.loads(line[6:]).get("choices", []):
                    streamed += choice.get("delta", {}).get("content") or ""
        self.assertEqual(streamed, with_spec)

    def test_json_schema_reply_is_the_same(self):
        schema = {"type": "object", "properties": {"dates": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
                  "required": ["dates"], "additionalProperties": False}
        fmt = {"type": "json_schema", "json_schema": {"name": "dates", "schema": schema}}
        a = self.chat(response_format=fmt, max_tokens=160)
        b = self.chat(response_format=fmt, max_tokens=160, speculative=False)
        self.assertEqual(a, b)

    def test_a_non_boolean_field_is_a_400_naming_it(self):
        status, text = self.server.post("/v1/completions", {"prompt": "a", "speculative": "no"})
        self.assertEqual(status, 400, text)
        self.assertEqual(json.loads(text)["error"]["param"], "speculative")


class DraftModelTest(SpeculativeTest):
    """The same checks with a draft model proposing (the default model as
    its own draft, at a fixed length: with a draft as costly as the target
    the adaptive length would rightly not speculate)."""

    @classmethod
    def setUpClass(cls):
        cls.server = Server(ARGS.brioche, ARGS.model, "--draft-model", ARGS.model, "--spec-fixed-length",
                            "--spec-tokens", "4", threads=2)

    def test_a_draft_with_another_vocabulary_is_refused_naming_both_sizes(self):
        other = os.path.join(HERE, "..", "fixtures", "qwen35", "dense")  # a 512-token vocabulary
        run = subprocess.run([ARGS.brioche, "run", "-m", ARGS.model, "--draft-model", other, "-p", "hi", "-n", "2"],
                             capture_output=True, text=True, timeout=120)
        self.assertNotEqual(run.returncode, 0, run.stdout)
        self.assertIn("--draft-model: its vocabulary has 512 tokens but the model's has 49152", run.stderr)


if __name__ == "__main__":
    sys.exit(e2e_main("speculative_e2e", globals()))
