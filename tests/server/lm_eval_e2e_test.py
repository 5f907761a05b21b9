#!/usr/bin/env python3
"""lm-evaluation-harness (lm_eval) against `brioche serve`, end to end.

Two local tasks (tests/server/lm_eval_tasks/: no Hugging Face hub needed):
  - brioche_mc, multiple choice through `local-completions`: lm_eval tokenizes
    with the server's /tokenize (its "remote" tokenizer backend) and scores
    each choice from /v1/completions with echo + logprobs. Checked: every
    loglikelihood lm_eval logged equals the sum of the continuation's logprobs
    that a request of our own returns (prompt token ids, echo, max_tokens 0),
    its is_greedy flag agrees, and acc equals our own count of argmax == gold.
  - brioche_gen, generate_until through `local-chat-completions`
    (--apply_chat_template): every reply lm_eval logged equals a greedy
    /v1/chat/completions reply of our own, and exact_match equals our own
    count of last-word == answer.

Run: python3 tests/server/lm_eval_e2e_test.py --brioche build/cpu/brioche [--model PATH]
Exits 77 (CTest: skipped) when lm_eval, the model or the binary is missing.
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_process import Server, e2e_main  # noqa: E402

ARGS = None
TASKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lm_eval_tasks")
MODEL = "smol"
# lm_eval's request (max_tokens 1) and ours (max_tokens 0) run the same
# prefill on the same engine: equal up to float summation order.
LOGPROB_TOLERANCE = 1e-4


def run_lm_eval(model_type, model_args, task, limit, out_dir, *extra):
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    cmd = [sys.executable, "-m", "lm_eval", "--model", model_type, "--model_args", model_args, "--tasks", task,
           "--include_path", TASKS, "--limit", str(limit), "--output_path", out_dir, "--log_samples", *extra]
    # Data files in the task YAMLs are relative to the task folder.
    r = subprocess.run(cmd, cwd=TASKS, env=env, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise AssertionError(f"lm_eval failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    with open(glob.glob(os.path.join(out_dir, "**", "results_*.json"), recursive=True)[-1]) as f:
        results = json.load(f)
    with open(glob.glob(os.path.join(out_dir, "**", f"samples_{task}_*.jsonl"), recursive=True)[-1]) as f:
        samples = [json.loads(line) for line in f]
    return results["results"][task], samples


class LmEvalTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server(ARGS.brioche, ARGS.model, "--model-name", MODEL, threads=2)
        cls.tmp = tempfile.mkdtemp(prefix="brioche_lm_eval_")

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def post(self, path, body):
        status, text = self.server.post(path, body)
        self.assertEqual(status, 200, text)
        return json.loads(text)

    def tokens(self, text):
        return self.post("/tokenize", {"prompt": text, "add_special_tokens": False})["tokens"]

    def continuation_score(self, context, continuation):
        """log p(continuation | context) and whether it is greedy, from our own request."""
        whole = self.tokens(context + continuation)
        ctxlen = len(self.tokens(context))
        out = self.post("/v1/completions", {"model": MODEL, "prompt": whole, "echo": True, "logprobs": 1, "max_tokens": 0})
        choice = out["choices"][0]
        self.assertEqual(choice["text"], context + continuation)
        self.assertEqual(out["usage"]["completion_tokens"], 0)
        lp = choice["logprobs"]
        self.assertEqual(len(lp["token_logprobs"]), len(whole))
        self.assertIsNone(lp["token_logprobs"][0])
        values = lp["token_logprobs"][ctxlen:]
        greedy = all(v >= max(top.values()) for v, top in zip(values, lp["top_logprobs"][ctxlen:]))
        return sum(values), greedy

    def test_multiple_choice_loglikelihoods_through_local_completions(self):
        base_url = f"http://127.0.0.1:{self.server.port}/v1/completions"
        metrics, samples = run_lm_eval("local-completions", f"base_url={base_url},model={MODEL},tokenizer_backend=remote",
                                       "brioche_mc", 8, os.path.join(self.tmp, "mc"))
        self.assertEqual(len(samples), 8)
        correct = 0
        for s in samples:
            scores = []
            for i, resp in enumerate(s["resps"]):
                args = s["arguments"][f"gen_args_{i}"]
                ll, greedy = float(resp[0][0]), resp[0][1] == "True"  # logged as strings
                ours, our_greedy = self.continuation_score(args["arg_0"], args["arg_1"])
                self.assertAlmostEqual(ll, ours, delta=LOGPROB_TOLERANCE, msg=f"doc {s['doc_id']} choice {i}")
                self.assertEqual(greedy, our_greedy, f"doc {s['doc_id']} choice {i}")
                self.assertLess(ours, 0.0)
                scores.append(ours)
            correct += int(max(range(len(scores)), key=scores.__getitem__) == s["doc"]["answer"])
        self.assertAlmostEqual(metrics["acc,none"], correct / len(samples), places=9)
        print(f"\nbrioche_mc: acc {metrics['acc,none']:.3f} ({correct}/{len(samples)}), loglikelihoods equal ours")

    def test_generate_until_through_local_chat_completions(self):
        base_url = f"http://127.0.0.1:{self.server.port}/v1/chat/completions"
        metrics, samples = run_lm_eval("local-chat-completions", f"base_url={base_url},model={MODEL}", "brioche_gen", 6,
                                       os.path.join(self.tmp, "gen"), "--apply_chat_template")
        self.assertEqual(len(samples), 6)
        correct = 0
        for s in samples:
            question = s["doc"]["question"]
            out = self.post("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": question}],
                                                     "max_tokens": 12, "temperature": 0, "stop": ["\n"]})
            reply = out["choices"][0]["message"]["content"]
            self.assertEqual(s["resps"][0][0], reply, question)
            words = re.findall(r"[A-Za-z0-9]+", reply)
            correct += int(bool(words) and words[-1].lower() == s["doc"]["answer"].lower())
        self.assertAlmostEqual(metrics["exact_match,last_word"], correct / len(samples), places=9)
        print(f"\nbrioche_gen: exact_match {metrics['exact_match,last_word']:.3f} ({correct}/{len(samples)}), replies equal ours")


if __name__ == "__main__":
    sys.exit(e2e_main("lm_eval_e2e", globals(), needs=("lm_eval", "datasets", "dill", "evaluate", "sqlitedict")))
