#!/usr/bin/env python3
"""End-to-end tests of `brioche serve` with the official openai client and curl.

Run: python3 tests/server/server_e2e_test.py --brioche build/cpu/brioche [--model PATH]
(CTest runs it through tests/server/CMakeLists.txt.) Prints a clear SKIP line
and exits 77 (CTest reports it as skipped) when python's `openai` package, curl or the default model is missing.
"""
import argparse
import asyncio
import concurrent.futures
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

ARGS = None
DEFAULT_MODEL = os.path.expanduser("~/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """A `brioche serve` child on a free loopback port."""

    def __init__(self, *extra):
        self.port = free_port()
        cmd = [ARGS.brioche, "serve", "-m", ARGS.model, "--port", str(self.port), "--ctx", "2048", *extra]
        self.log = tempfile.TemporaryFile()  # closed in stop()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"brioche serve exited with {self.proc.returncode}: {self.output()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.1)
        raise RuntimeError("brioche serve did not become healthy in 60 s: " + self.output())

    def output(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def curl(*args):
    out = subprocess.run(["curl", "-s", "-w", "\n%{http_code}", *args], capture_output=True, text=True, timeout=120)
    body, _, code = out.stdout.rpartition("\n")
    return int(code), body


def metric(url, name):
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"metric {name} missing")


class ServerTest(unittest.TestCase):
    server = None

    @classmethod
    def setUpClass(cls):
        import openai
        cls.server = ServerProcess("--max-queue", "64")
        cls.client = openai.OpenAI(base_url=cls.server.url + "/v1", api_key="unused", max_retries=0)
        cls.aclient = openai.AsyncOpenAI(base_url=cls.server.url + "/v1", api_key="unused", max_retries=0)
        cls.model = cls.client.models.list().data[0].id

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def chat(self, **kw):
        kw.setdefault("model", self.model)
        kw.setdefault("messages", [{"role": "user", "content": "What is the capital of France?"}])
        return self.client.chat.completions.create(**kw)

    # ---- endpoints ---------------------------------------------------------

    def test_models_health_metrics(self):
        models = self.client.models.list()
        self.assertEqual(len(models.data), 1)
        self.assertEqual(self.client.models.retrieve(self.model).id, self.model)
        code, body = curl(self.server.url + "/health")
        self.assertEqual((code, json.loads(body)["status"]), (200, "ok"))
        code, body = curl(self.server.url + "/metrics")
        self.assertEqual(code, 200)
        for name in ["brioche_requests_total", "brioche_queue_depth", "brioche_kv_usage_ratio",
                     "brioche_time_to_first_token_seconds_bucket", "brioche_inter_token_latency_seconds_count",
                     "brioche_generation_tokens_total"]:
            self.assertIn(name, body)

    def test_chat_greedy_answers(self):
        messages = [{"role": "system", "content": "You are a helpful assistant who answers geography questions "
                                                  "with one short, precise sentence."},
                    {"role": "user", "content": "What is the capital of France?"}]
        r = self.chat(temperature=0, max_tokens=20, messages=messages)
        self.assertEqual(r.object, "chat.completion")
        self.assertIn("Paris", r.choices[0].message.content)
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertIn(r.choices[0].finish_reason, ("stop", "length"))
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens)
        # Same request again: identical (greedy) and served from the prefix cache.
        again = self.chat(temperature=0, max_tokens=20, messages=messages)
        self.assertEqual(again.choices[0].message.content, r.choices[0].message.content)
        self.assertGreater(again.usage.prompt_tokens_details.cached_tokens, 0)

    def test_content_parts_and_system_and_multiturn(self):
        r = self.chat(temperature=0, max_tokens=8, messages=[
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": [{"type": "text", "text": "Name a color."}]},
            {"role": "assistant", "content": "Blue."},
            {"role": "user", "content": "Another one."}])
        self.assertTrue(r.choices[0].message.content)

    def test_chat_stream_with_and_without_usage(self):
        chunks = list(self.chat(temperature=0, max_tokens=12, stream=True, stream_options={"include_usage": True}))
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        self.assertEqual(len(finals), 1)
        self.assertIsNotNone(chunks[-1].usage)
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, 12 if finals[0] == "length" else chunks[-1].usage.completion_tokens)
        plain = self.chat(temperature=0, max_tokens=12)
        self.assertEqual(text, plain.choices[0].message.content)
        no_usage = list(self.chat(temperature=0, max_tokens=4, stream=True))
        self.assertTrue(all(c.usage is None for c in no_usage))

    def test_sampling_parameters_and_seed(self):
        kw = dict(temperature=0.9, top_p=0.9, max_tokens=16, seed=1234, presence_penalty=0.5,
                  frequency_penalty=0.2, stop=["\n\n"], user="tester",
                  extra_body={"top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1})
        a = self.chat(**kw).choices[0].message.content
        b = self.chat(**kw).choices[0].message.content
        self.assertEqual(a, b)  # same seed, same tokens
        self.assertNotIn("\n\n", a)

    def test_logit_bias_forces_a_token(self):
        # Token 28 is a plain ASCII byte token in SmolLM2's vocabulary; +100 makes it certain.
        r = self.chat(max_tokens=3, logit_bias={"28": 100}, temperature=1.0, seed=1, logprobs=True)
        self.assertEqual(len(r.choices[0].logprobs.content), 3)

    def test_n_choices(self):
        r = self.chat(n=3, max_tokens=6, temperature=1.0, seed=7)
        self.assertEqual(sorted(c.index for c in r.choices), [0, 1, 2])
        self.assertLessEqual(r.usage.completion_tokens, 18)
        self.assertGreaterEqual(r.usage.completion_tokens, 3)

    def test_logprobs(self):
        r = self.chat(temperature=0, max_tokens=5, logprobs=True, top_logprobs=3)
        content = r.choices[0].logprobs.content
        self.assertEqual(len(content), r.usage.completion_tokens)
        for entry in content:
            self.assertLessEqual(entry.logprob, 0.0)
            self.assertEqual(len(entry.top_logprobs), 3)
            # greedy: the chosen token is the most likely one
            self.assertAlmostEqual(entry.top_logprobs[0].logprob, entry.logprob, places=4)

    def test_completions(self):
        r = self.client.completions.create(model=self.model, prompt="The capital of France is", max_tokens=6,
                                           temperature=0, logprobs=2, echo=True)
        self.assertEqual(r.object, "text_completion")
        self.assertTrue(r.choices[0].text.startswith("The capital of France is"))
        self.assertIn("Paris", r.choices[0].text)
        # echo + logprobs lists the prompt's tokens first (OpenAI's legacy
        # completions; lm-eval's loglikelihood relies on it): 5 + 6 generated.
        lp = r.choices[0].logprobs
        self.assertEqual(len(lp.tokens), 11)
        self.assertEqual("".join(lp.tokens), r.choices[0].text)
        self.assertIsNone(lp.token_logprobs[0])
        self.assertTrue(all(v < 0 for v in lp.token_logprobs[1:]))
        self.assertEqual(lp.text_offset[:2], [0, len(lp.tokens[0])])
        streamed = "".join(c.choices[0].text for c in self.client.completions.create(
            model=self.model, prompt="The capital of France is", max_tokens=6, temperature=0, stream=True) if c.choices)
        self.assertEqual("The capital of France is" + streamed, r.choices[0].text)
        tokens = self.client.completions.create(model=self.model, prompt=[504, 3575, 282], max_tokens=2, temperature=0)
        self.assertEqual(tokens.usage.prompt_tokens, 3)

    def test_responses(self):
        r = self.client.responses.create(model=self.model, input="What is the capital of France?",
                                         instructions="Answer in one sentence.", max_output_tokens=20, temperature=0)
        self.assertEqual(r.object, "response")
        self.assertIn("Paris", r.output_text)
        self.assertGreater(r.usage.output_tokens, 0)
        events = list(self.client.responses.create(model=self.model, input=[{"role": "user", "content": "Say hello."}],
                                                   max_output_tokens=8, temperature=0, stream=True))
        types = [e.type for e in events]
        self.assertEqual(types[0], "response.created")
        self.assertIn(types[-1], ("response.completed", "response.incomplete"))
        delta = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        done = [e for e in events if e.type == "response.output_text.done"][0]
        self.assertEqual(delta, done.text)
        self.assertEqual([e.sequence_number for e in events], list(range(len(events))))

    def test_async_concurrent_requests_match_sequential(self):
        prompts = [f"Count from {i} to {i + 3}." for i in range(6)]

        async def run():
            return await asyncio.gather(*[self.aclient.chat.completions.create(
                model=self.model, messages=[{"role": "user", "content": p}], max_tokens=10, temperature=0)
                for p in prompts])

        batched = [r.choices[0].message.content for r in asyncio.run(run())]
        alone = [self.chat(messages=[{"role": "user", "content": p}], max_tokens=10, temperature=0).choices[0].message.content
                 for p in prompts]
        self.assertEqual(batched, alone)

    def test_tool_choice_named_is_parsed_into_tool_calls(self):
        tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                                   "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                                  "required": ["city"]}}}]
        r = self.chat(messages=[{"role": "user", "content": "What's the weather in Paris?"}], tools=tools,
                      tool_choice={"type": "function", "function": {"name": "get_weather"}}, temperature=0, max_tokens=40)
        msg = r.choices[0].message
        if msg.tool_calls:  # the 135M model usually completes the forced call
            self.assertEqual(r.choices[0].finish_reason, "tool_calls")
            self.assertEqual(msg.tool_calls[0].function.name, "get_weather")
            json.loads(msg.tool_calls[0].function.arguments)
        else:
            self.assertTrue(msg.content.startswith("<tool_call>"), msg.content)
        # tool results in the conversation are accepted
        r2 = self.chat(messages=[{"role": "user", "content": "Weather in Paris?"},
                                 {"role": "assistant", "content": None, "tool_calls": [
                                     {"id": "call_1", "type": "function",
                                      "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                                 {"role": "tool", "tool_call_id": "call_1", "content": "22 C, sunny"}],
                       tools=tools, max_tokens=10, temperature=0)
        self.assertIsNotNone(r2.choices[0].message)

    def test_streamed_tool_call_arguments_arrive_in_fragments(self):
        # OpenAI's chunk shape: the call's first delta has index, id, type and
        # function.name; then deltas with index + function.arguments fragments,
        # which concatenate to the non-streaming arguments (greedy: same tokens).
        tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                                   "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                                  "required": ["city"]}}}]
        kw = dict(messages=[{"role": "user", "content": "What's the weather in Paris?"}], tools=tools,
                  tool_choice={"type": "function", "function": {"name": "get_weather"}}, temperature=0, max_tokens=40)
        whole = self.chat(**kw)
        self.assertEqual(whole.choices[0].finish_reason, "tool_calls")
        expected = whole.choices[0].message.tool_calls[0]
        calls, fragments, finish = {}, {}, None
        for chunk in self.chat(stream=True, **kw):
            choice = chunk.choices[0]
            finish = choice.finish_reason or finish
            for tc in choice.delta.tool_calls or []:
                if tc.index not in calls:
                    self.assertTrue(tc.id and tc.type == "function" and tc.function.name, tc)
                    calls[tc.index] = {"id": tc.id, "name": tc.function.name, "arguments": tc.function.arguments or ""}
                else:
                    self.assertIsNone(tc.id)
                    self.assertIsNone(tc.function.name)
                    calls[tc.index]["arguments"] += tc.function.arguments
                fragments[tc.index] = fragments.get(tc.index, 0) + 1
        self.assertEqual(finish, "tool_calls")
        self.assertEqual(list(calls), [0])
        self.assertEqual(calls[0]["name"], expected.function.name)
        self.assertEqual(calls[0]["arguments"], expected.function.arguments)
        json.loads(calls[0]["arguments"])
        self.assertGreater(fragments[0], 2, "arguments came in one delta")

    # ---- errors ------------------------------------------------------------

    def test_errors_have_openai_shape(self):
        import openai
        url = self.server.url + "/v1/chat/completions"
        cases = [
            ("{not json", 400, None),
            ('{"messages": "hi"}', 400, "messages"),
            ('{"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}', 400, "temperature"),
            ('{"messages": [{"role": "user", "content": "hi"}], "max_tokens": -1}', 400, "max_tokens"),
            ('{"messages": [{"role": "user", "content": "hi"}], "n": 0}', 400, "n"),
            ('{"messages": [{"role": "wizard", "content": "hi"}]}', 400, "messages[0].role"),
            ('{"messages": [{"role": "user", "content": "hi"}], "stop": 5}', 400, "stop"),
            ('{"model": "gpt-9", "messages": [{"role": "user", "content": "hi"}]}', 404, "model"),
            ('{"messages": [{"role": "user", "content": "hi"}], "tool_choice": "required"}', 400, "tool_choice"),
        ]
        for body, status, param in cases:
            code, text = curl(url, "-H", "Content-Type: application/json", "-d", body)
            self.assertEqual(code, status, body)
            err = json.loads(text)["error"]
            self.assertEqual(set(err), {"message", "type", "param", "code"})
            self.assertEqual(err["param"], param, body)
        code, _ = curl(self.server.url + "/v1/nothing")
        self.assertEqual(code, 404)
        code, _ = curl("-X", "GET", url)
        self.assertEqual(code, 405)
        with self.assertRaises(openai.BadRequestError) as ctx:
            self.chat(messages=[{"role": "user", "content": "word " * 3000}])
        self.assertIn("context", str(ctx.exception))
        # the server keeps serving
        self.assertTrue(self.chat(max_tokens=2).choices[0].message.content is not None)

    def test_body_limit_413(self):
        with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
            f.write('{"messages": [{"role": "user", "content": "' + "a" * (9 << 20) + '"}]}')
            f.flush()
            code, text = curl(self.server.url + "/v1/chat/completions", "-H", "Content-Type: application/json",
                              "--data-binary", "@" + f.name)
        self.assertEqual(code, 413)
        self.assertIn("limit", json.loads(text)["error"]["message"])

    def test_cors_preflight(self):
        out = subprocess.run(["curl", "-s", "-i", "-X", "OPTIONS", self.server.url + "/v1/chat/completions",
                              "-H", "Origin: http://example.com", "-H", "Access-Control-Request-Method: POST",
                              "-H", "Access-Control-Request-Headers: authorization, content-type"],
                             capture_output=True, text=True).stdout.lower()
        self.assertIn("204", out.splitlines()[0])
        self.assertIn("access-control-allow-origin: *", out)
        self.assertIn("access-control-allow-headers: authorization, content-type", out)

    def test_client_disconnect_cancels(self):
        before = metric(self.server.url, "brioche_cancelled_requests_total")
        with socket.create_connection(("127.0.0.1", self.server.port)) as s:
            body = json.dumps({"messages": [{"role": "user", "content": "Tell a very long story."}],
                               "max_tokens": 1500, "stream": True, "temperature": 1.0, "ignore_eos": True})
            s.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
            got = b""
            while got.count(b"data:") < 3:
                got += s.recv(4096)
        deadline = time.time() + 20
        while time.time() < deadline and metric(self.server.url, "brioche_cancelled_requests_total") <= before:
            time.sleep(0.05)
        self.assertGreater(metric(self.server.url, "brioche_cancelled_requests_total"), before)
        self.assertEqual(metric(self.server.url, "brioche_requests_in_flight"), 0)


class AuthAndLimitsTest(unittest.TestCase):
    def test_api_key(self):
        import openai
        server = ServerProcess("--api-key", "sekret")
        try:
            code, text = curl(server.url + "/v1/models")
            self.assertEqual(code, 401)
            self.assertEqual(json.loads(text)["error"]["code"], "invalid_api_key")
            with self.assertRaises(openai.AuthenticationError):
                openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0).models.list()
            ok = openai.OpenAI(base_url=server.url + "/v1", api_key="sekret", max_retries=0)
            self.assertEqual(len(ok.models.list().data), 1)
            code, _ = curl(server.url + "/health")  # health needs no key
            self.assertEqual(code, 200)
        finally:
            server.stop()

    def test_queue_full_429_and_graceful_shutdown(self):
        server = ServerProcess("--max-queue", "1")
        try:
            body = json.dumps({"messages": [{"role": "user", "content": "Write a long story."}],
                               "max_tokens": 200, "stream": True, "ignore_eos": True})
            first = subprocess.Popen(["curl", "-sN", server.url + "/v1/chat/completions", "-d", body],
                                     stdout=subprocess.PIPE, text=True)
            # The first stream is in flight once its first event arrives (a fixed sleep raced a fast machine).
            head = first.stdout.readline()
            self.assertTrue(head.startswith("data: "), head)
            out = subprocess.run(["curl", "-s", "-i", server.url + "/v1/chat/completions", "-d", body],
                                 capture_output=True, text=True).stdout
            self.assertIn(" 429", out.splitlines()[0])
            self.assertIn("retry-after: 1", out.lower())
            # SIGTERM while the first stream runs: it still completes, then the process exits 0.
            server.proc.send_signal(signal.SIGTERM)
            streamed, _ = first.communicate(timeout=60)
            streamed = head + streamed
            self.assertTrue(streamed.rstrip().endswith("data: [DONE]"), streamed[-300:])
            self.assertEqual(server.proc.wait(timeout=30), 0)
        finally:
            server.stop()


class PreparationQueueTest(unittest.TestCase):
    """Requests wait for the preparation pool up to --max-queue and a bound on their bodies' bytes."""

    @staticmethod
    def post(url, body):
        req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=300) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def burst(self, url, bodies):
        with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
            return list(pool.map(lambda b: self.post(url, b), bodies))

    @staticmethod
    def schema_body(i, padding=""):
        # A schema of its own per request: each is compiled, so the preparations overlap. Room for the
        # whitespace the grammar allows before the key (which the model takes or not, by the CPU's kernels).
        schema = {"type": "object", "properties": {f"field_{i}": {"type": "integer", "minimum": i}},
                  "required": [f"field_{i}"], "additionalProperties": False}
        return {"messages": [{"role": "user", "content": "A number as JSON." + padding}], "max_tokens": 24,
                "temperature": 0, "response_format": {"type": "json_schema",
                                                      "json_schema": {"name": f"s{i}", "schema": schema}}}

    def test_a_burst_of_small_requests_waits_its_turn(self):
        # One preparation thread; 48 requests with their own schemas at once (the old bound took 8).
        server = ServerProcess("--prepare-threads", "1")
        try:
            results = self.burst(server.url, [self.schema_body(i) for i in range(48)])
            self.assertEqual([status for status, _ in results], [200] * 48, [r for r in results if r[0] != 200][:2])
            for i, (_, out) in enumerate(results):
                self.assertIn(f'"field_{i}"', out["choices"][0]["message"]["content"])
        finally:
            server.stop()

    def test_large_bodies_past_the_byte_bound_get_a_named_429(self):
        # --max-body 64 KiB and one thread: 512 KiB of bodies may wait; 24 bodies of ~60 KiB at once exceed it.
        server = ServerProcess("--prepare-threads", "1", "--max-body", "65536")
        try:
            results = self.burst(server.url, [self.schema_body(i, " " * 60000) for i in range(24)])
            statuses = [status for status, _ in results]
            self.assertTrue(set(statuses) <= {200, 429}, statuses)
            refused = [out for status, out in results if status == 429]
            self.assertTrue(refused, statuses)
            self.assertIn("too many request bytes being prepared (512 KiB)", refused[0]["error"]["message"])
            self.assertEqual(self.post(server.url, self.schema_body(99))[0], 200)  # and it keeps serving
        finally:
            server.stop()


class TimeoutTest(unittest.TestCase):
    """A per-request timeout that hits mid-generation is an error, never a finish_reason."""

    @classmethod
    def setUpClass(cls):
        import openai
        cls.server = ServerProcess("--timeout", "0.5")
        cls.client = openai.OpenAI(base_url=cls.server.url + "/v1", api_key="unused")  # default retries
        cls.model = cls.client.models.list().data[0].id
        cls.long = dict(model=cls.model, messages=[{"role": "user", "content": "Write a long story."}], max_tokens=1500,
                        extra_body={"ignore_eos": True})

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def requests_with_status(self, status):
        with urllib.request.urlopen(self.server.url + "/metrics", timeout=5) as r:
            return sum(float(line.split()[1]) for line in r.read().decode().splitlines()
                       if line.startswith("brioche_requests_total{") and f'status="{status}"' in line)

    def test_stream_ends_with_an_error_event(self):
        import openai
        before = self.requests_with_status(408)
        chunks = []
        with self.assertRaises(openai.APIError) as raised:  # the openai client raises an in-stream error
            for chunk in self.client.chat.completions.create(stream=True, **self.long):
                chunks.append(chunk)
        self.assertEqual(raised.exception.code, "timeout")
        self.assertIn("timeout", str(raised.exception))
        self.assertTrue(any(c.choices and c.choices[0].delta.content for c in chunks), "text before the timeout")
        self.assertTrue(all(c.choices[0].finish_reason is None for c in chunks if c.choices))
        self.assertEqual(self.requests_with_status(408) - before, 1)
        # on the wire: the error event, then [DONE]
        body = json.dumps({"messages": self.long["messages"], "max_tokens": 1500, "ignore_eos": True, "stream": True})
        code, text = curl("-N", self.server.url + "/v1/chat/completions", "-d", body)
        events = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
        self.assertEqual(code, 200)
        self.assertEqual(events[-1], "[DONE]")
        self.assertEqual(json.loads(events[-2])["error"]["code"], "timeout")
        self.assertNotIn('"finish_reason":"stop"', text)

    def test_non_streaming_is_408_and_not_retried(self):
        import openai
        before = self.requests_with_status(408)
        with self.assertRaises(openai.APIStatusError) as raised:
            self.client.chat.completions.create(**self.long)
        self.assertEqual(raised.exception.status_code, 408)
        self.assertEqual(raised.exception.code, "timeout")
        self.assertEqual(raised.exception.response.headers.get("x-should-retry"), "false")
        self.assertEqual(self.requests_with_status(408) - before, 1, "the client retried a server-side timeout")
        # the same keep-alive connection serves the next request from a clean state
        chunks = list(self.client.chat.completions.create(model=self.model, messages=self.long["messages"], max_tokens=3,
                                                          stream=True))
        self.assertEqual([c.choices[0].finish_reason for c in chunks if c.choices][-1], "length")

    def test_responses_stream_fails(self):
        events = list(self.client.responses.create(model=self.model, input="Write a long story.", max_output_tokens=1500,
                                                   stream=True, extra_body={"ignore_eos": True}))
        self.assertEqual(events[-1].type, "response.failed")
        self.assertEqual(events[-1].response.status, "failed")
        self.assertEqual(events[-1].response.error.code, "timeout")
        self.assertFalse(any(e.type == "response.completed" for e in events))


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--brioche", default=os.environ.get("BRIOCHE_BIN", "build/cpu/brioche"))
    parser.add_argument("--model", default=os.environ.get("BRIOCHE_MODEL", DEFAULT_MODEL))
    ARGS, rest = parser.parse_known_args()
    try:
        import openai  # noqa: F401
    except ImportError:
        print("SKIP server_e2e: python package 'openai' is not installed (pip install openai)")
        return 77  # CTest: SKIP_RETURN_CODE
    for need, what in [(shutil.which("curl"), "curl"), (os.path.exists(ARGS.model), f"model {ARGS.model}"),
                       (os.path.exists(ARGS.brioche), f"binary {ARGS.brioche}")]:
        if not need:
            print(f"SKIP server_e2e: {what} not found")
            return 77  # CTest: SKIP_RETURN_CODE
    result = unittest.main(argv=[sys.argv[0], *rest], exit=False, verbosity=2).result
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
