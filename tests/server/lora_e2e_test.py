#!/usr/bin/env python3
"""LoRA adapters served as models (issue 43), end to end on the default model.

One server runs 8 random PEFT adapters unmerged (different ranks, targets,
rsLoRA) beside the base; a second runs adapter a0 merged (`--adapter`). Checked:
  - /v1/models lists the base and every adapter with the base as parent
  - greedy tokens with a0 unmerged equal a0 merged, alone and in a batch of 16
    streams over the 8 adapters and the base, and every row of the batch
    equals its request alone. Both servers of this comparison convert the
    base to f32 (--weights-dtype f32): merged weights are f32, and a Q4_1
    base matmul on 8-bit activations moves logprobs by up to ~0.2 nats,
    which flips near-ties; in f32 the two differ by < 0.01
  - the official openai client: model=<adapter> for chat (streamed, n=2,
    logprobs, structured output), completions and responses
  - llama.cpp's GGUF LoRA files serve what the PEFT folder does
  - live loading and unloading, unload during a stream, broken adapters
    (missing tensor, wrong shape, rank too high, path outside --lora-dir) as
    4xx naming the problem, the server serving after each
  - the prefix cache never shares K/V across adapters; /metrics per adapter

Run: python3 tests/server/lora_e2e_test.py --brioche build/cpu/brioche [--model PATH]
Exits 77 (CTest: skipped) when the model, the binary, numpy, gguf or openai is missing.
"""
import concurrent.futures
import json
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_process import Server, e2e_main  # noqa: E402

ARGS = None
# f32 unmerged against f32 merged: summation order and f16 K/V rounding only
# (measured 0.0024 nats at most over 6 prompts x 40 tokens).
LOGPROB_TOLERANCE = 0.01
# The greedy token may differ only where the reference's best two are this
# close (a true tie at "Name three colors." token 1: 0.0013 nats apart);
# the texts part there, and the comparison ends.
NEAR_TIE = 2 * LOGPROB_TOLERANCE
PROMPTS = ["Name three colors.", "Write a haiku about bread.", "What is the capital of France?", "Count to five."]


def adapter_specs():
    """Eight adapters: name -> write_adapter keyword arguments."""
    every = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    return {
        "a0": dict(seed=10), "a1": dict(seed=11, rank=4, targets=("q_proj", "v_proj")),
        "a2": dict(seed=12, rank=16, alpha=16, rslora=True), "a3": dict(seed=13, targets=("down_proj", "up_proj")),
        "a4": dict(seed=14, rank=2, alpha=8), "a5": dict(seed=15, targets=every[:4]),
        "a6": dict(seed=16, rank=12, targets=every[4:]), "a7": dict(seed=17, b_std=0.08),
    }


def chat(model, content, max_tokens=24, **extra):
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, "temperature": 0, **extra}
    if model:
        body["model"] = model
    return body


class LoraServing(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from peft_adapter import write_adapter
        cls.tmp = tempfile.mkdtemp(prefix="brioche-lora-")
        cls.lora_dir = os.path.join(cls.tmp, "adapters")
        for name, spec in adapter_specs().items():
            write_adapter(os.path.join(cls.lora_dir, name), **spec)
        cls.write_adapter = staticmethod(write_adapter)
        cls.server = Server(ARGS.brioche, ARGS.model, "--lora-dir", cls.lora_dir, "--allow-runtime-lora",
                            "--max-loras", "4", "--max-lora-rank", "32", threads=2)
        cls.exact = Server(ARGS.brioche, ARGS.model, "--weights-dtype", "f32", "--lora-dir", cls.lora_dir, threads=1)
        cls.merged = Server(ARGS.brioche, ARGS.model, "--weights-dtype", "f32", "--adapter",
                            os.path.join(cls.lora_dir, "a0"), threads=1)
        status, body = cls.server.get("/v1/models")
        cls.base = json.loads(body)["data"][0]["id"]

    @classmethod
    def tearDownClass(cls):
        for server in (cls.server, cls.exact, cls.merged):
            server.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def post(self, server, path, body):
        status, text = server.post(path, body)
        return status, json.loads(text)

    def generate(self, server, model, prompt, logprobs=False):
        extra = {"logprobs": True, "top_logprobs": 2} if logprobs else {}
        status, body = self.post(server, "/v1/chat/completions", chat(model, prompt, **extra))
        self.assertEqual(status, 200, body)
        return body["choices"][0]

    def assert_same_greedy(self, got, reference, what):
        """The same tokens with logprobs within LOGPROB_TOLERANCE, up to a near-tie of the reference."""
        got_tokens, ref_tokens = got["logprobs"]["content"], reference["logprobs"]["content"]
        for i, (g, r) in enumerate(zip(got_tokens, ref_tokens)):
            if g["token"] != r["token"]:
                top = r["top_logprobs"]
                margin = top[0]["logprob"] - top[1]["logprob"]
                self.assertLess(margin, NEAR_TIE, f"{what}: token {i} is {g['token']!r}, not {r['token']!r}, "
                                f"where the reference's best two were {margin:.4f} nats apart")
                return
            self.assertLess(abs(g["logprob"] - r["logprob"]), LOGPROB_TOLERANCE, f"{what}: token {i}")
        self.assertEqual(got["message"]["content"], reference["message"]["content"], what)

    def assert_serving(self):
        status, body = self.post(self.server, "/v1/chat/completions", chat("a1", "Say hi.", max_tokens=3))
        self.assertEqual(status, 200, body)

    # ---- models -------------------------------------------------------------------

    def test_models_lists_base_and_adapters(self):
        status, body = self.server.get("/v1/models")
        data = json.loads(body)["data"]
        self.assertEqual(data[0]["parent"], None)
        adapters = {m["id"]: m for m in data[1:]}
        self.assertTrue(set(adapter_specs()) <= set(adapters), adapters.keys())
        self.assertTrue(all(m["parent"] == self.base for m in adapters.values()))
        self.assertEqual(adapters["a2"]["lora_rank"], 16)
        status, body = self.server.get("/v1/models/a3")
        self.assertEqual((status, json.loads(body)["id"]), (200, "a3"))

    def test_unknown_model_is_404(self):
        status, body = self.post(self.server, "/v1/chat/completions", chat("nope", "Hi"))
        self.assertEqual(status, 404, body)
        self.assertEqual(body["error"]["code"], "model_not_found")

    # ---- arithmetic -----------------------------------------------------------------

    def test_unmerged_equals_merged(self):
        differs_from_base = 0
        for prompt in PROMPTS:
            unmerged = self.generate(self.exact, "a0", prompt, logprobs=True)
            merged = self.generate(self.merged, "", prompt, logprobs=True)
            self.assert_same_greedy(unmerged, merged, f"a0 on {prompt!r}")
            base = self.generate(self.exact, "", prompt)
            differs_from_base += base["message"]["content"] != unmerged["message"]["content"]
        self.assertGreater(differs_from_base, 0, "the adapter changed no answer: the comparison proves nothing")

    def test_batch_of_16_over_8_adapters_and_base(self):
        names = list(adapter_specs())
        jobs = [(names[i % 8] if i < 14 else "", PROMPTS[i % len(PROMPTS)]) for i in range(16)]
        alone = {job: self.generate(self.exact, job[0], job[1], logprobs=True) for job in set(jobs)}
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            batched = list(pool.map(lambda job: self.generate(self.exact, job[0], job[1], logprobs=True), jobs))
        for job, got in zip(jobs, batched):
            self.assert_same_greedy(got, alone[job], f"{job[0] or 'base'} on {job[1]!r} in the batch")
        a0 = [got for job, got in zip(jobs, batched) if job[0] == "a0"]
        merged = self.generate(self.merged, "", jobs[0][1], logprobs=True)
        self.assert_same_greedy(a0[0], merged, "a0 in the batch against merged")

    def test_prefix_cache_not_shared_across_adapters(self):
        prompt = "Tell me about the history of bread making in Europe, " * 8
        for _ in range(2):
            status, base = self.post(self.server, "/v1/chat/completions", chat("", prompt, max_tokens=2))
        self.assertGreater(base["usage"]["prompt_tokens_details"]["cached_tokens"], 0, base["usage"])
        path = self.write_adapter(os.path.join(self.lora_dir, "fresh"), seed=30)
        status, body = self.post(self.server, "/v1/load_lora_adapter", {"lora_name": "fresh", "lora_path": path})
        self.assertEqual(status, 200, body)
        status, adapted = self.post(self.server, "/v1/chat/completions", chat("fresh", prompt, max_tokens=2))
        self.assertEqual(adapted["usage"]["prompt_tokens_details"]["cached_tokens"], 0, adapted["usage"])
        status, again = self.post(self.server, "/v1/chat/completions", chat("fresh", prompt, max_tokens=2))
        self.assertGreater(again["usage"]["prompt_tokens_details"]["cached_tokens"], 0, again["usage"])

    # ---- the official client --------------------------------------------------------

    def test_openai_client(self):
        import openai
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{self.server.port}/v1", api_key="unused")
        r = client.chat.completions.create(model="a3", messages=[{"role": "user", "content": "Hi"}], max_tokens=8,
                                           temperature=0, n=2, logprobs=True, top_logprobs=2)
        self.assertEqual(r.model, "a3")
        self.assertEqual(len(r.choices), 2)
        self.assertTrue(r.choices[0].logprobs.content)
        pieces = [c.choices[0].delta.content or "" for c in client.chat.completions.create(
            model="a4", messages=[{"role": "user", "content": "Hi"}], max_tokens=8, temperature=0, stream=True)
            if c.choices]
        whole = client.chat.completions.create(model="a4", messages=[{"role": "user", "content": "Hi"}], max_tokens=8,
                                               temperature=0)
        self.assertEqual("".join(pieces), whole.choices[0].message.content)
        schema = {"type": "object", "properties": {"color": {"type": "string", "enum": ["red", "blue"]}},
                  "required": ["color"], "additionalProperties": False}
        r = client.chat.completions.create(model="a7", messages=[{"role": "user", "content": "Pick a color."}],
                                           max_tokens=40, temperature=0, response_format={
                                               "type": "json_schema", "json_schema": {"name": "c", "schema": schema, "strict": True}})
        self.assertIn(json.loads(r.choices[0].message.content)["color"], ["red", "blue"])
        c = client.completions.create(model="a1", prompt="The sky is", max_tokens=6, temperature=0)
        self.assertEqual(c.model, "a1")
        self.assertTrue(c.choices[0].text)
        resp = client.responses.create(model="a2", input="Say hello.", max_output_tokens=8, temperature=0)
        self.assertEqual(resp.model, "a2")
        self.assertTrue(resp.output_text)

    def test_gguf_lora_equals_peft(self):
        """llama.cpp's GGUF LoRA (written with its `gguf` package, q/k rows
        interleaved as its converter does) serves what the PEFT folder does."""
        from peft_adapter import write_gguf_adapter
        import numpy as np
        peft = self.write_adapter(os.path.join(self.lora_dir, "twin_peft"), seed=60)
        gguf_file = write_gguf_adapter(os.path.join(self.lora_dir, "twin.gguf"), seed=60, dtype=np.float16)
        for name, path in (("twin_peft", peft), ("twin_gguf", gguf_file)):
            status, body = self.post(self.server, "/v1/load_lora_adapter", {"lora_name": name, "lora_path": path})
            self.assertEqual(status, 200, body)
        for prompt in PROMPTS[:2]:
            want = self.generate(self.server, "twin_peft", prompt, logprobs=True)
            got = self.generate(self.server, "twin_gguf", prompt, logprobs=True)
            self.assertEqual(got["message"]["content"], want["message"]["content"])
            for g, w in zip(got["logprobs"]["content"], want["logprobs"]["content"]):
                self.assertAlmostEqual(g["logprob"], w["logprob"], places=5)
        base = self.generate(self.server, "", PROMPTS[1])
        self.assertNotEqual(base["message"]["content"], want["message"]["content"])

    # ---- live loading -----------------------------------------------------------------

    def test_load_use_unload(self):
        path = self.write_adapter(os.path.join(self.lora_dir, "live"), seed=40)
        status, body = self.post(self.server, "/v1/load_lora_adapter", {"lora_name": "live", "lora_path": path})
        self.assertEqual(status, 200, body)
        self.assertEqual(self.generate(self.server, "live", "Hi")["message"]["content"] != "", True)
        status, body = self.post(self.server, "/v1/load_lora_adapter", {"lora_name": "live", "lora_path": path})
        self.assertEqual(status, 409, body)
        status, body = self.post(self.server, "/v1/unload_lora_adapter", {"lora_name": "live"})
        self.assertEqual(status, 200, body)
        status, body = self.post(self.server, "/v1/chat/completions", chat("live", "Hi"))
        self.assertEqual(status, 404, body)
        status, body = self.post(self.server, "/v1/unload_lora_adapter", {"lora_name": "live"})
        self.assertEqual(status, 404, body)

    def test_download_and_delete(self):
        """GET /v1/models/{id}/files[/name] hands out the adapter's own files byte for byte; DELETE
        /v1/models/{id} (OpenAI's shape) stops serving it and keeps the files."""
        import http.client
        path = self.write_adapter(os.path.join(self.lora_dir, "parting"), seed=42)
        os.makedirs(os.path.join(path, "checkpoints"))  # a folder: not offered
        os.symlink("/etc/passwd", os.path.join(path, "passwd"))  # a link: not offered
        status, body = self.post(self.server, "/v1/load_lora_adapter", {"lora_name": "parting", "lora_path": path})
        self.assertEqual(status, 200, body)
        status, body = self.server.get("/v1/models/parting/files")
        self.assertEqual(status, 200, body)
        names = [f["name"] for f in json.loads(body)["data"]]
        self.assertEqual(names, ["adapter_config.json", "adapter_model.safetensors"])
        for name in names:
            conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=30)
            conn.request("GET", f"/v1/models/parting/files/{name}")
            r = conn.getresponse()
            data = r.read()
            conn.close()
            self.assertEqual(r.status, 200, name)
            self.assertIn("attachment", r.getheader("Content-Disposition"))
            with open(os.path.join(path, name), "rb") as f:
                self.assertEqual(data, f.read(), name)
        for bad in ("passwd", "..%2Fa0%2Fadapter_config.json", "../a0/adapter_config.json", "checkpoints", "nothing"):
            status, body = self.server.get(f"/v1/models/parting/files/{bad}")
            self.assertEqual(status, 404, (bad, body))
        status, body = self.server.get(f"/v1/models/{self.base}/files")
        self.assertEqual(status, 404, body)
        status, body = self.server.request("DELETE", f"/v1/models/{self.base}")
        self.assertEqual(status, 403, body)
        status, body = self.server.request("DELETE", "/v1/models/parting")
        self.assertEqual((status, json.loads(body)), (200, {"id": "parting", "object": "model", "deleted": True}))
        status, body = self.server.get("/v1/models/parting")
        self.assertEqual(status, 404, body)
        status, body = self.server.request("DELETE", "/v1/models/parting")
        self.assertEqual(status, 404, body)
        self.assertTrue(os.path.exists(os.path.join(path, "adapter_model.safetensors")))
        # A server without --allow-runtime-lora refuses to delete (as it refuses to unload).
        status, body = self.exact.request("DELETE", "/v1/models/a0")
        self.assertEqual(status, 403, body)

    def test_unload_during_stream_lets_it_finish(self):
        import openai
        path = self.write_adapter(os.path.join(self.lora_dir, "doomed"), seed=41)
        status, body = self.post(self.server, "/v1/load_lora_adapter", {"lora_name": "doomed", "lora_path": path})
        self.assertEqual(status, 200, body)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{self.server.port}/v1", api_key="unused")
        stream = client.chat.completions.create(model="doomed", messages=[{"role": "user", "content": "Tell a story."}],
                                                max_tokens=60, temperature=0, stream=True, extra_body={"ignore_eos": True})
        chunks, unloaded, finish = 0, False, None
        for chunk in stream:
            chunks += 1
            if chunks == 3 and not unloaded:
                status, body = self.post(self.server, "/v1/unload_lora_adapter", {"lora_name": "doomed"})
                self.assertEqual(status, 200, body)
                unloaded = True
            if chunk.choices and chunk.choices[0].finish_reason:
                finish = chunk.choices[0].finish_reason
        self.assertTrue(unloaded)
        self.assertEqual(finish, "length")
        self.assert_serving()

    def test_broken_adapters_are_4xx(self):
        d = self.lora_dir
        cases = [
            ("missing", self.write_adapter(os.path.join(d, "missing"), seed=50,
                                           drop="base_model.model.model.layers.3.mlp.up_proj.lora_B.weight"),
             400, "layers.3.mlp.up_proj.lora_B.weight"),
            ("shape", self.write_adapter(os.path.join(d, "shape"), seed=51, shapes={
                "layers": 30, "hidden": 576, "inter": 1024, "q": 576, "kv": 192}), 400, "expected shape"),
            ("rank", self.write_adapter(os.path.join(d, "rank"), seed=52, rank=64, targets=("q_proj",)), 400, "rank"),
            ("outside", self.write_adapter(os.path.join(self.tmp, "outside"), seed=53), 403, "outside --lora-dir"),
            ("dots", os.path.join(d, "..", "outside"), 403, "outside --lora-dir"),
            ("nothing", os.path.join(d, "does-not-exist"), 400, "does not exist"),
            ("config", self.write_adapter(os.path.join(d, "config"), seed=54, config_extra={"r": "eight"}), 400, "\"r\""),
        ]
        os.symlink(os.path.join(self.tmp, "outside"), os.path.join(d, "link"))
        cases.append(("link", os.path.join(d, "link"), 403, "outside --lora-dir"))
        for name, path, want, says in cases:
            status, body = self.post(self.server, "/v1/load_lora_adapter", {"lora_name": name, "lora_path": path})
            self.assertEqual(status, want, f"{name}: {body}")
            self.assertIn(says, body["error"]["message"], name)
            self.assert_serving()
        for bad in [{"lora_name": 3}, {"lora_path": "x"}, [1], "not json"]:
            status, body = self.server.post("/v1/load_lora_adapter", bad if isinstance(bad, str) else json.dumps(bad))
            self.assertEqual(status, 400, body)
        self.assertTrue(self.server.alive())

    def test_runtime_loading_needs_the_switch(self):
        status, body = self.post(self.merged, "/v1/load_lora_adapter", {"lora_name": "x", "lora_path": "/tmp"})
        self.assertEqual(status, 403, body)

    def test_zz_metrics_per_adapter(self):
        status, text = self.server.get("/metrics")
        self.assertIn('brioche_model_requests_total{model="a1"}', text)
        self.assertIn("brioche_lora_adapters_loaded", text)
        resident = [l for l in text.splitlines() if l.startswith("brioche_lora_adapters_resident ")]
        self.assertLessEqual(float(resident[0].split()[1]), 4)


if __name__ == "__main__":
    sys.exit(e2e_main("lora_e2e", globals(), needs=("numpy", "openai", "gguf")))
