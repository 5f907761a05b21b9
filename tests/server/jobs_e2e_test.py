#!/usr/bin/env python3
"""Files and fine-tuning jobs (issue 44), end to end with the official openai client.

A real `brioche serve` (its own --data-dir) on the default model:
  - client.files.create / list / retrieve / content / delete, and the preview
  - client.fine_tuning.jobs.create (ORPO, a few steps on tiny rows) / retrieve /
    list / list_events; the job succeeds, its adapter (and best-margin
    checkpoint) is served as a model at once and answers a chat request;
    per-step metrics with TRL's names; checkpoints; SSE events end in [DONE]
  - restart mid-job, twice: the server stopped (SIGTERM), later killed
    (SIGKILL) while the trainer runs; each next server shows the job
    interrupted, resume continues it from its checkpoint, and it finishes
    with the same number of steps, one metric row per step, every earlier
    event kept
  - `brioche train --report-to`: a run by hand in the job list; a cancel
    there stops it at a checkpoint; no key is refused
  - pause / resume / cancel
  - bad input, each a 4xx in OpenAI's error shape, the server serving after:
    malformed and empty JSONL, a file over --max-file-bytes, a path in a file
    name, a preference file in an SFT job, an unknown method and option, a
    model that does not exist, too many queued jobs, no API key

Run: python3 tests/server/jobs_e2e_test.py --brioche build/cpu/brioche [--model PATH]
Exits 77 (CTest: skipped) when the model, the binary or openai is missing.
"""
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_process import Server, e2e_main  # noqa: E402

ARGS = None
KEY = "jobs-test-key"
PREFS = [
    {"prompt": "What is 2+2?", "chosen": "4", "rejected": "5"},
    {"prompt": "Capital of France?", "chosen": "Paris", "rejected": "Rome"},
    {"prompt": "Color of the sky?", "chosen": "Blue", "rejected": "Green"},
    {"prompt": "Opposite of hot?", "chosen": "Cold", "rejected": "Warm"},
]
SFT = [{"messages": [{"role": "user", "content": "Say hi"}, {"role": "assistant", "content": "Hi!"}]},
       {"prompt": "Say bye", "completion": "Bye!"}]
FINAL = ("succeeded", "failed", "cancelled")


def jsonl(rows):
    return ("\n".join(json.dumps(r) for r in rows) + "\n").encode()


def orpo(**hyper):
    return {"type": "orpo", "orpo": {"hyperparameters": {"max_length": 48, "rank": 4, **hyper}}}


class JobsServer(Server):
    def __init__(self, data_dir, *extra):
        super().__init__(ARGS.brioche, ARGS.model, "--api-key", KEY, "--data-dir", data_dir, *extra, threads=2)

    def client(self):
        import openai
        return openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key=KEY, max_retries=0)

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def wait_for(predicate, what, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def metrics(server, job_id):
    status, body = server.request("GET", f"/v1/fine_tuning/jobs/{job_id}/metrics",
                                  headers={"Authorization": f"Bearer {KEY}"})
    assert status == 200, body
    return json.loads(body)


class JobsTest(unittest.TestCase):
    def setUp(self):
        self.data_dir = tempfile.mkdtemp(prefix="brioche-jobs-")
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            s.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def start(self, *extra):
        s = JobsServer(self.data_dir, *extra)
        self.servers.append(s)
        return s

    def model(self, client):
        return client.models.list().data[0].id

    def test_job_lifecycle_with_the_openai_client(self):
        server = self.start()
        client = server.client()
        base = self.model(client)
        f = client.files.create(file=("prefs.jsonl", jsonl(PREFS)), purpose="fine-tune")
        self.assertTrue(f.id.startswith("file-"))
        self.assertEqual(f.filename, "prefs.jsonl")
        self.assertEqual(f.bytes, len(jsonl(PREFS)))
        self.assertEqual(client.files.retrieve(f.id).id, f.id)
        self.assertIn(f.id, [x.id for x in client.files.list()])
        self.assertEqual(client.files.content(f.id).read(), jsonl(PREFS))
        status, body = server.request("GET", f"/v1/files/{f.id}/preview?max_length=24",
                                      headers={"Authorization": f"Bearer {KEY}"})
        preview = json.loads(body)
        self.assertEqual((status, preview["kind"], preview["rows"]), (200, "preference", 4), body)
        self.assertEqual(sum(preview["token_lengths"]["histogram"]["counts"]), 4)
        lengths = preview["token_lengths"]
        self.assertEqual(preview["truncated_rows"], 4 if lengths["min"] > 24 else preview["truncated_rows"])

        job = client.fine_tuning.jobs.create(model=base, training_file=f.id, suffix="e2e", seed=3,
                                             method=orpo(n_steps=6, steps_per_eval=3))
        self.assertTrue(job.id.startswith("ftjob-"))
        self.assertIn(job.status, ("queued", "running"))
        self.assertIn(job.id, [j.id for j in client.fine_tuning.jobs.list()])
        done = wait_for(lambda: (j := client.fine_tuning.jobs.retrieve(job.id)).status in FINAL and j, "the job")
        self.assertEqual(done.status, "succeeded", done.error)
        self.assertEqual(done.fine_tuned_model, f"ft:{base}:e2e:{job.id}")
        extra = done.model_extra or {}
        self.assertEqual(extra.get("step"), 6)
        self.assertEqual(extra.get("total_steps"), 6)
        served = [m.id for m in client.models.list()]
        self.assertIn(done.fine_tuned_model, served)
        for name in extra.get("served_models", []):
            self.assertIn(name, served)
        reply = client.chat.completions.create(model=done.fine_tuned_model, max_tokens=4, temperature=0,
                                               messages=[{"role": "user", "content": "What is 2+2?"}])
        self.assertEqual(reply.model, done.fine_tuned_model)

        events = list(client.fine_tuning.jobs.list_events(job.id, limit=3))  # pages of 3, auto-paginated
        messages = [e.message for e in events]
        self.assertTrue(any(m.startswith("step 6/6") for m in messages), messages)
        self.assertTrue(any(m.startswith("serving ft:") for m in messages), messages)
        ids = [int(e.id.split("-")[1]) for e in events]
        self.assertEqual(ids, sorted(ids, reverse=True))  # newest first, as OpenAI
        rows = metrics(server, job.id)["data"]
        steps = [r["step"] for r in rows if r["kind"] == "step"]
        self.assertEqual(steps, [1, 2, 3, 4, 5, 6])
        self.assertIn("log_odds_ratio", rows[0])  # ORPO's TRL name
        self.assertEqual([r["step"] for r in rows if r["kind"] == "eval"], [0, 3, 6])
        status, body = server.request("GET", f"/v1/fine_tuning/jobs/{job.id}/checkpoints",
                                      headers={"Authorization": f"Bearer {KEY}"})
        checkpoints = json.loads(body)["data"]
        self.assertEqual([c["step_number"] for c in checkpoints], [6, 3])
        status, body = server.request("GET", f"/v1/fine_tuning/jobs/{job.id}/events?stream=true",
                                      headers={"Authorization": f"Bearer {KEY}"})
        self.assertEqual(status, 200)
        self.assertTrue(body.rstrip().endswith("data: [DONE]"), body[-200:])
        self.assertEqual(body.count("data: {"), len(events))
        client.files.delete(f.id)
        self.assertNotIn(f.id, [x.id for x in client.files.list()])

    def test_restart_mid_job_then_resume(self):
        server = self.start()
        client = server.client()
        f = client.files.create(file=("prefs.jsonl", jsonl(PREFS)), purpose="fine-tune")
        total = 30
        job = client.fine_tuning.jobs.create(model=self.model(client), training_file=f.id,
                                             method=orpo(n_steps=total, save_steps=4))
        # First a graceful stop (SIGTERM: the server stops its trainer), then a crash (SIGKILL:
        # the trainer gets SIGHUP from the kernel and checkpoints on its own).
        for at_step, stop in ((3, "stop"), (12, "kill")):
            wait_for(lambda: (client.fine_tuning.jobs.retrieve(job.id).model_extra or {}).get("step", 0) >= at_step,
                     f"step {at_step}")
            events_before = [e.id for e in client.fine_tuning.jobs.list_events(job.id, limit=1000)]
            getattr(server, stop)()
            server = self.start()
            client = server.client()
            j = client.fine_tuning.jobs.retrieve(job.id)
            self.assertEqual(j.status, "interrupted", stop)
            self.assertTrue((j.model_extra or {}).get("resumable"))
            events_after = [e.id for e in client.fine_tuning.jobs.list_events(job.id, limit=1000)]
            self.assertTrue(set(events_before) <= set(events_after), stop)  # nothing in the database lost
            status, body = server.post(f"/v1/fine_tuning/jobs/{job.id}/resume", {})
            self.assertEqual(status, 401, body)  # resume needs the key too
            status, body = server.request("POST", f"/v1/fine_tuning/jobs/{job.id}/resume",
                                          headers={"Authorization": f"Bearer {KEY}"})
            self.assertEqual(status, 200, body)
            self.assertEqual(json.loads(body)["status"], "queued")
        done = wait_for(lambda: (j := client.fine_tuning.jobs.retrieve(job.id)).status in FINAL and j, "the resumed job", timeout=900)
        self.assertEqual(done.status, "succeeded", done.error)
        self.assertEqual((done.model_extra or {}).get("step"), total)
        steps = [r["step"] for r in metrics(server, job.id)["data"] if r["kind"] == "step"]
        self.assertEqual(steps, list(range(1, total + 1)))  # one row per step, none lost or doubled
        messages = [e.message for e in client.fine_tuning.jobs.list_events(job.id, limit=1000)]
        self.assertEqual(sum("resuming from step_" in m for m in messages), 2, messages)
        with open(os.path.join(self.data_dir, "jobs", job.id, "output", "metrics.json")) as fh:
            self.assertEqual(json.load(fh)["steps"], total)

    def test_pause_resume_cancel_and_bad_input(self):
        import openai
        server = self.start("--max-file-bytes", "4096", "--max-queued-jobs", "1")
        client = server.client()
        base = self.model(client)
        prefs = client.files.create(file=("prefs.jsonl", jsonl(PREFS)), purpose="fine-tune")
        sft = client.files.create(file=("sft.jsonl", jsonl(SFT)), purpose="fine-tune")
        self.assertEqual(sft.model_extra.get("kind"), "sft")

        def refused(status, code, call):
            with self.assertRaises(openai.APIStatusError) as caught:
                call()
            e = caught.exception
            self.assertEqual(e.status_code, status, e.response.text)
            body = e.response.json()
            self.assertEqual(set(body["error"]), {"message", "type", "param", "code"})
            if code:
                self.assertEqual(body["error"]["code"], code, body)
            self.assertEqual(server.get("/health")[0], 200)
            return body["error"]

        err = refused(400, "invalid_file", lambda: client.files.create(
            file=("bad.jsonl", jsonl(PREFS[:1]) + b"{not json\n"), purpose="fine-tune"))
        self.assertIn("line 2", err["message"])
        refused(400, "invalid_file", lambda: client.files.create(file=("empty.jsonl", b"\n"), purpose="fine-tune"))
        refused(400, "invalid_file", lambda: client.files.create(
            file=("mixed.jsonl", jsonl(PREFS[:1] + SFT[:1])), purpose="fine-tune"))
        refused(413, "file_too_large", lambda: client.files.create(
            file=("big.jsonl", jsonl(PREFS * 40)), purpose="fine-tune"))
        refused(400, "invalid_filename", lambda: client.files.create(
            file=("../../etc/prefs.jsonl", jsonl(PREFS)), purpose="fine-tune"))
        refused(400, "file_kind_mismatch", lambda: client.fine_tuning.jobs.create(
            model=base, training_file=prefs.id, method={"type": "supervised"}))
        refused(400, "file_kind_mismatch", lambda: client.fine_tuning.jobs.create(
            model=base, training_file=sft.id, method=orpo()))
        refused(400, "invalid_method", lambda: client.fine_tuning.jobs.create(
            model=base, training_file=prefs.id, method={"type": "reinforce"}))
        err = refused(400, "unknown_hyperparameter", lambda: client.fine_tuning.jobs.create(
            model=base, training_file=prefs.id, method=orpo(warp_factor=9)))
        self.assertEqual(err["param"], "method.orpo.hyperparameters.warp_factor")
        err = refused(400, "invalid_hyperparameter", lambda: client.fine_tuning.jobs.create(
            model=base, training_file=prefs.id, method=orpo(rank="eight")))
        self.assertEqual(err["param"], "method.orpo.hyperparameters.rank")
        refused(400, "model_not_found", lambda: client.fine_tuning.jobs.create(
            model="gpt-4o-mini", training_file=prefs.id, method=orpo()))
        refused(400, "file_not_found", lambda: client.fine_tuning.jobs.create(
            model=base, training_file="file-0000000000000000", method=orpo()))
        refused(404, "job_not_found", lambda: client.fine_tuning.jobs.retrieve("ftjob-0000000000000000"))
        err = refused(400, "over_memory_budget", lambda: client.fine_tuning.jobs.create(
            model=base, training_file=prefs.id, method=orpo(max_length=1 << 20, batch_size=64)))
        self.assertIn("MiB", err["message"])
        import openai as o
        nokey = o.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="wrong", max_retries=0)
        refused(401, "invalid_api_key", lambda: nokey.files.list())
        refused(401, "invalid_api_key", lambda: nokey.fine_tuning.jobs.list())

        # One running (long), one queued, the next refused; pause, resume, cancel.
        a = client.fine_tuning.jobs.create(model=base, training_file=prefs.id, method=orpo(n_steps=400))
        wait_for(lambda: client.fine_tuning.jobs.retrieve(a.id).status == "running", "job a running")
        b = client.fine_tuning.jobs.create(model=base, training_file=prefs.id, method=orpo(n_steps=2))
        self.assertEqual(b.status, "queued")
        refused(429, "too_many_jobs", lambda: client.fine_tuning.jobs.create(
            model=base, training_file=prefs.id, method=orpo(n_steps=2)))
        wait_for(lambda: (client.fine_tuning.jobs.retrieve(a.id).model_extra or {}).get("step", 0) >= 1, "a step")
        status, body = server.request("POST", f"/v1/fine_tuning/jobs/{a.id}/pause",
                                      headers={"Authorization": f"Bearer {KEY}"})
        self.assertEqual((status, json.loads(body)["status"]), (200, "paused"), body)
        wait_for(lambda: any(e.message.startswith("paused at step") for e in client.fine_tuning.jobs.list_events(a.id, limit=100)),
                 "the paused trainer's checkpoint")
        refused(409, "invalid_state", lambda: client.fine_tuning.jobs.cancel(b.id) and client.fine_tuning.jobs.cancel(b.id))
        self.assertEqual(client.fine_tuning.jobs.retrieve(b.id).status, "cancelled")
        status, body = server.request("POST", f"/v1/fine_tuning/jobs/{a.id}/resume",
                                      headers={"Authorization": f"Bearer {KEY}"})
        self.assertEqual(status, 200, body)
        wait_for(lambda: client.fine_tuning.jobs.retrieve(a.id).status == "running", "job a running again")
        self.assertEqual(client.fine_tuning.jobs.cancel(a.id).status, "cancelled")
        messages = wait_for(lambda: (m := [e.message for e in client.fine_tuning.jobs.list_events(a.id, limit=100)])
                            and any(x.startswith("the trainer stopped") for x in m) and m, "the cancelled trainer to stop")
        self.assertTrue(any("resuming from step_" in x for x in messages), messages)
        self.assertEqual(client.models.list().data[0].id, base)  # still serving

        # A trainer that fails (refuses its options) and one that dies: the job fails with the
        # trainer's stderr tail, the server serves on.
        bad = client.fine_tuning.jobs.create(model=base, training_file=prefs.id, method=orpo(device="cpu", gpus=2))
        failed = wait_for(lambda: (j := client.fine_tuning.jobs.retrieve(bad.id)).status in FINAL and j, "the failing job")
        self.assertEqual(failed.status, "failed")
        self.assertEqual(failed.error.code, "trainer_failed")
        self.assertIn("trains on GPUs", failed.error.message)
        doomed = client.fine_tuning.jobs.create(model=base, training_file=prefs.id, method=orpo(n_steps=400))
        started = wait_for(lambda: [e.message for e in client.fine_tuning.jobs.list_events(doomed.id, limit=100)
                                    if e.message.startswith("started (trainer pid")], "the trainer to start")
        os.kill(int(started[0].split("pid ")[1].split(")")[0]), signal.SIGKILL)
        crashed = wait_for(lambda: (j := client.fine_tuning.jobs.retrieve(doomed.id)).status in FINAL and j, "the crash")
        self.assertEqual(crashed.status, "failed")
        self.assertIn("killed by signal", crashed.error.message)
        self.assertEqual(server.get("/health")[0], 200)
        self.assertEqual(client.models.list().data[0].id, base)

    def test_train_report_to_a_server(self):
        import subprocess
        server = self.start()
        client = server.client()
        work = tempfile.mkdtemp(prefix="brioche-report-")
        try:
            os.makedirs(os.path.join(work, "data"))
            with open(os.path.join(work, "data", "train.jsonl"), "wb") as fh:
                fh.write(jsonl(PREFS))
            train = [ARGS.brioche, "train", "-m", ARGS.model, "-d", os.path.join(work, "data"), "--method", "orpo",
                     "--max-seq-length", "48", "--rank", "4", "--threads", "2", "--report-to", f"http://127.0.0.1:{server.port}"]
            env = {**os.environ, "BRIOCHE_API_KEY": KEY}
            done = subprocess.run(train + ["--iters", "4", "-o", os.path.join(work, "a")], env=env,
                                  capture_output=True, text=True, timeout=300)
            self.assertEqual(done.returncode, 0, done.stderr)
            job = client.fine_tuning.jobs.list().data[0]
            self.assertEqual(job.status, "succeeded")
            self.assertEqual(((job.model_extra or {}).get("step"), (job.model_extra or {}).get("total_steps")), (4, 4))
            steps = [r["step"] for r in metrics(server, job.id)["data"] if r["kind"] == "step"]
            self.assertEqual(steps, [1, 2, 3, 4])
            # Cancelled on the server: the trainer stops after its step, with its checkpoint (exit 130).
            proc = subprocess.Popen(train + ["--iters", "400", "-o", os.path.join(work, "b")], env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            running = wait_for(lambda: [j for j in client.fine_tuning.jobs.list().data
                                        if j.status == "running" and (j.model_extra or {}).get("step", 0) >= 1], "a reported step")
            self.assertEqual(client.fine_tuning.jobs.cancel(running[0].id).status, "cancelled")
            self.assertEqual(proc.wait(timeout=120), 130, proc.stderr.read())
            proc.stderr.close()
            self.assertTrue(os.path.isdir(os.path.join(work, "b", "checkpoints")))
            bad = subprocess.run(train + ["--iters", "1", "-o", os.path.join(work, "c")], capture_output=True, text=True,
                                 env={k: v for k, v in os.environ.items() if k != "BRIOCHE_API_KEY"}, timeout=300)
            self.assertNotEqual(bad.returncode, 0)
            self.assertIn("401", bad.stderr)  # no key: the server refuses, the run says so
        finally:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(e2e_main("jobs_e2e", globals(), needs=("openai",)))
