#!/usr/bin/env python3
"""The web workbench in a real browser (issue 44): headless Chromium from
Debian driven by selenium against `brioche serve` on the default model.

One flow, in order, as a user would go:
  - the page loads from the binary with no key, shows the 401 in OpenAI's
    shape, and connects once the API key is entered (kept in localStorage)
  - a malformed JSONL upload shows the server's 400 invalid_file error
  - a small preference file uploads; the preview shows its rows, the
    token-length histogram and the rows max_length will cut
  - an ORPO job starts from the Fine-tune tab; on the Jobs tab its loss chart
    gains points while the job runs (read from the chart card's data-points),
    and it finishes `succeeded` with charts, the best-margin step and a log
  - a second job's estimate comes from the first job's speed and memory
    bound; it is paused, resumed and cancelled from its buttons
  - the Adapters tab lists the trained adapter with its metrics; the job's
    adapter is loaded again under a new name through the load form (the
    server's data directory lies inside --lora-dir) and unloaded
  - the Playground answers from the trained adapter beside the base
Screenshots of each tab go to --screenshots (CTest: the build directory).

Run: python3 tests/web/workbench_test.py --brioche build/cpu/brioche [--screenshots DIR]
Exits 77 (CTest: skipped) with a SKIP line when selenium, chromium,
chromedriver, the model or the binary is missing.
"""
import json
import os
import shutil
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "server"))
from serve_process import Server, e2e_main, SKIP  # noqa: E402

ARGS = None
SCREENSHOTS = ""  # --screenshots DIR
KEY = "workbench-key"
# Waits end with a failure only when something never happens; they bound
# how long the test may hang, they do not measure speed.
WAIT_S = 180

PAIRS = [
    ("What color is the sky on a clear day?", "Blue.", "Green, like grass."),
    ("Name a fruit that is yellow.", "A banana.", "A cucumber."),
    ("What is two plus two?", "Four.", "Five."),
    ("Which animal barks?", "A dog.", "A fish."),
    ("What do bees make?", "Honey.", "Milk."),
    ("Where does the sun rise?", "In the east.", "In the north."),
    ("How many legs does a spider have?", "Eight.", "Six."),
    ("What freezes into ice?", "Water.", "Sand."),
]
# One long row: the preview must report it as cut at max_length.
LONG_PROMPT = "Summarize this: " + " ".join(["bread is baked from flour, water and yeast."] * 12)


def find_browser():
    """(chromium, chromedriver) paths, or None."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (chromium, driver) if chromium and driver else None


class Workbench(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        cls.tmp = tempfile.mkdtemp(prefix="brioche-workbench-")
        cls.lora_dir = os.path.join(cls.tmp, "adapters")
        # Inside --lora-dir, so a job's output may be loaded again at run time.
        cls.data_dir = os.path.join(cls.lora_dir, "server-data")
        os.makedirs(cls.lora_dir)
        cls.shots = SCREENSHOTS or os.path.join(cls.tmp, "screenshots")
        os.makedirs(cls.shots, exist_ok=True)
        cls.server = Server(ARGS.brioche, ARGS.model, "--api-key", KEY, "--data-dir", cls.data_dir, "--lora-dir", cls.lora_dir,
                            "--allow-runtime-lora", threads=2)
        chromium, driver = find_browser()
        options = webdriver.ChromeOptions()
        options.binary_location = chromium
        for arg in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1100", "--disable-gpu"]:
            options.add_argument(arg)
        # The chromedriver path given: selenium must not look for (download) one.
        cls.driver = webdriver.Chrome(service=Service(driver), options=options)
        cls.url = f"http://127.0.0.1:{cls.server.port}/"

    @classmethod
    def tearDownClass(cls):
        cls.driver.quit()
        cls.server.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    # ---- helpers ------------------------------------------------------------

    def css(self, selector):
        from selenium.webdriver.common.by import By
        return self.driver.find_element(By.CSS_SELECTOR, selector)

    def all(self, selector):
        from selenium.webdriver.common.by import By
        return self.driver.find_elements(By.CSS_SELECTOR, selector)

    def js(self, script, *args):
        return self.driver.execute_script(script, *args)

    def wait_for(self, what, condition, timeout=WAIT_S, poll=0.1):
        deadline = time.time() + timeout
        while time.time() < deadline:
            value = condition()
            if value:
                return value
            time.sleep(poll)
        self.fail(f"waited {timeout} s for {what}; errors on the page: {self.error_texts()}; server log tail: "
                  f"{self.server.output()[-1500:]}")

    def error_texts(self):
        return [e.text for e in self.all(".error-banner")]

    def dismiss_errors(self):
        self.js("document.querySelector('#errors').replaceChildren()")

    def tab(self, name):
        self.css(f"#tabs a[data-tab={name}]").click()
        self.wait_for(f"the {name} tab", lambda: self.css(f"#tab-{name}").is_displayed())

    def shot(self, name):
        path = os.path.join(self.shots, f"workbench-{name}.png")
        self.driver.save_screenshot(path)
        print(f"screenshot: {path}")

    def write_file(self, name, lines):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write("".join(line + "\n" for line in lines))
        return path

    def upload(self, path):
        self.css("#ft-file").send_keys(path)
        self.css("#ft-upload").click()

    # ---- the flow -----------------------------------------------------------

    def test_workbench(self):
        self.connect_with_key()
        self.bad_upload_shows_the_error()
        file_id = self.upload_and_preview()
        job_id = self.train_orpo(file_id)
        self.pause_resume_cancel(job_id)
        adapter = self.adapters(job_id)
        self.playground(adapter)
        self.assertTrue(self.server.alive())

    def connect_with_key(self):
        self.driver.get(self.url + "#finetune")
        self.wait_for("the page to start", lambda: self.css("body").get_attribute("data-ready") == "true")
        # No key yet: /v1/models answers 401 in OpenAI's shape, and the page says so.
        errors = self.wait_for("the 401 banner", lambda: [t for t in self.error_texts() if "401" in t])
        self.assertIn("invalid_api_key", errors[0])
        self.assertEqual(self.css("#server-model").text, "not connected")
        self.css("#api-key").send_keys(KEY)
        self.css("#api-key-form button").click()
        self.wait_for("the connection", lambda: "SmolLM2" in self.css("#server-model").text)
        self.assertEqual(self.js("return localStorage.getItem('brioche.apiKey')"), KEY)
        self.assertEqual(self.error_texts(), [])

    def bad_upload_shows_the_error(self):
        path = self.write_file("broken.jsonl", [json.dumps({"prompt": "a", "chosen": "b", "rejected": "c"}), "{not json"])
        self.upload(path)
        errors = self.wait_for("the upload error", lambda: [t for t in self.error_texts() if "invalid_file" in t])
        self.assertIn("400", errors[0])
        self.assertIn("line 2", errors[0])
        self.dismiss_errors()

    def upload_and_preview(self):
        rows = [json.dumps({"prompt": p, "chosen": c, "rejected": r}) for p, c, r in PAIRS]
        rows.append(json.dumps({"prompt": LONG_PROMPT, "chosen": "Bread is flour, water and yeast, baked.", "rejected": "Cake."}))
        self.css("#ft-max-length").clear()
        self.css("#ft-max-length").send_keys("64")
        self.upload(self.write_file("prefs.jsonl", rows))
        self.wait_for("the preview", lambda: self.css("#ft-preview").is_displayed() and
                      self.css("#ft-preview-stats").get_attribute("data-truncated") is not None)
        stats = self.css("#ft-preview-stats").text
        self.assertIn("rows 9", stats)
        self.assertIn("kind preference", stats)
        self.assertEqual(self.css("#ft-preview-stats").get_attribute("data-truncated"), "1", stats)
        bars = self.js("return Chart.getChart(document.querySelector('#ft-histogram')).data.datasets[0].data")
        self.assertEqual(sum(bars), 9)
        self.assertEqual(len(self.all("#ft-preview-sample tbody tr")), 5)
        # The upload picked a preference method (ORPO) for a preference file.
        self.assertTrue(self.css(".method-card[data-method=orpo]").get_attribute("class").endswith("selected"))
        self.shot("finetune")
        return self.css("#ft-training-file").get_attribute("value")

    def train_orpo(self, file_id):
        self.assertTrue(file_id.startswith("file-"), file_id)
        self.css(".method-card[data-method=orpo]").click()
        for field, value in [("#ft-steps", "24"), ("#ft-eval-steps", "6"), ("#ft-rank", "4"), ("#ft-lr", "0.0005"),
                             ("#ft-suffix", "web")]:
            self.css(field).clear()
            self.css(field).send_keys(value)
        self.css(".preset-card[data-preset=speed]").click()
        self.css("#ft-start").click()
        # The page moves to the job.
        job_id = self.wait_for("the job view", lambda: self.css("#job-detail").is_displayed() and
                               self.css("#job-detail").get_attribute("data-job"))
        self.assertTrue(job_id.startswith("ftjob-"), job_id)
        # Sample the loss chart while the job runs: it must gain points before the job ends.
        seen = []

        def sample():
            status, points = self.js("const d = document.querySelector('#job-detail');"
                                     "const c = document.querySelector('.chart-card[data-chart=loss]');"
                                     "return [d.dataset.status, c ? Number(c.dataset.points) : 0];")
            seen.append((status, points))
            return status in ("succeeded", "failed", "cancelled")

        self.wait_for("the job to finish", sample, poll=0.05)
        # Two different positive point counts while the status was running: the chart grew live.
        running = sorted({points for status, points in seen if status == "running" and points > 0})
        self.assertGreaterEqual(len(running), 2, f"the loss chart did not grow while the job ran: {seen[-30:]}")
        self.assertEqual(seen[-1][0], "succeeded", self.css("#job-summary").text)
        # After the end: the final rows, every chart kind the rows carry, the log.
        self.wait_for("the last loss point", lambda: self.loss_points() >= 24)
        charts = {c.get_attribute("data-chart") for c in self.all(".chart-card")}
        for expected in ["loss", "nll", "odds", "accuracy", "margin", "logps", "lr", "grad_norm", "tokens_per_s"]:
            self.assertIn(expected, charts)
        self.assertIn("best margin step", self.css("#job-summary").text)
        log = self.css("#job-log").text
        self.assertIn("step 24", log)
        self.assertTrue(self.css("#job-cancel").get_attribute("disabled"))
        self.assertTrue(self.css("#job-resume").get_attribute("disabled"))
        self.js("window.scrollTo(0, 0)")
        self.driver.set_window_size(1400, 2300)
        self.shot("jobs")
        self.driver.set_window_size(1400, 1100)
        return job_id

    def loss_points(self):
        cards = self.all(".chart-card[data-chart=loss]")
        return int(cards[0].get_attribute("data-points")) if cards else 0

    def job_status(self):
        return self.css("#job-detail").get_attribute("data-status")

    def pause_resume_cancel(self, first_job):
        # A second, longer job with the first one's levers and shape: the
        # estimate now comes from the first job's measured speed and bound.
        self.tab("finetune")
        self.css("#ft-steps").clear()
        self.css("#ft-steps").send_keys("400")
        self.css("#ft-batch").click()  # leaves the steps field: its change event
        estimate = self.wait_for("a measured estimate", lambda: first_job in self.css("#ft-estimate").text and
                                 self.css("#ft-estimate").text)
        self.assertIn("Time: ≈", estimate)
        self.assertIn("Memory: ≤", estimate)
        self.css("#ft-start").click()
        job_id = self.wait_for("the second job", lambda: self.css("#job-detail").get_attribute("data-job") != first_job and
                               self.css("#job-detail").get_attribute("data-job"))
        self.wait_for("it to train", lambda: self.job_status() == "running" and self.loss_points() > 0)
        self.assertFalse(self.css("#job-pause").get_attribute("disabled"))
        self.css("#job-pause").click()
        self.wait_for("paused", lambda: self.job_status() == "paused")
        self.assertTrue(self.css("#job-pause").get_attribute("disabled"))
        self.wait_for("the pause in the log", lambda: "paused" in self.css("#job-log").text)
        self.css("#job-resume").click()
        self.wait_for("queued or running again", lambda: self.job_status() in ("queued", "running"))
        self.css("#job-cancel").click()
        self.wait_for("cancelled", lambda: self.job_status() == "cancelled")
        self.assertTrue(self.css("#job-cancel").get_attribute("disabled"))
        self.assertEqual(self.error_texts(), [])
        self.assertNotEqual(job_id, first_job)

    def adapters(self, job_id):
        self.tab("adapters")
        row = self.wait_for("the trained adapter's row", lambda: [r for r in self.all("#adapters-table tbody tr")
                                                                   if job_id in r.text])
        self.wait_for("its metrics", lambda: "step" in row[0].find_element("css selector", "td.metrics").text)
        adapter = row[0].get_attribute("data-adapter")
        self.assertTrue(adapter.startswith("ft:") and adapter.endswith(job_id), adapter)
        # Load the job's output again under another name, then unload it.
        output = os.path.join(self.data_dir, "jobs", job_id, "output")
        self.assertTrue(os.path.exists(os.path.join(output, "adapter_config.json")), output)
        self.css("#adapter-load-name").send_keys("orpo-again")
        self.css("#adapter-load-path").send_keys(os.path.relpath(output, self.lora_dir))
        self.css("#adapter-load-form button").click()
        self.wait_for("the loaded adapter", lambda: self.all("#adapters-table tr[data-adapter=orpo-again]:not(.unloaded)"))
        self.assertEqual(self.error_texts(), [])
        self.shot("adapters")
        self.css("#adapters-table tr[data-adapter=orpo-again] button.secondary").click()
        self.wait_for("the unloaded adapter", lambda: self.all("#adapters-table tr.unloaded[data-adapter=orpo-again]"))
        # A load outside --lora-dir is the server's 403, shown as such.
        self.css("#adapter-load-name").send_keys("outside")
        self.css("#adapter-load-path").send_keys("/etc")
        self.css("#adapter-load-form button").click()
        errors = self.wait_for("the 403 banner", lambda: [t for t in self.error_texts() if "403" in t])
        self.assertIn("outside --lora-dir", errors[0])
        self.dismiss_errors()
        return adapter

    def playground(self, adapter):
        # "Try" on the adapter's row opens the playground with it selected beside the base.
        self.css(f"#adapters-table tr[data-adapter='{adapter}'] button.primary").click()
        self.wait_for("the playground", lambda: self.css("#tab-playground").is_displayed())
        columns = [c.get_attribute("data-model") for c in self.all(".pg-column")]
        self.assertEqual(len(columns), 2, columns)
        self.assertIn(adapter, columns)
        self.css("#pg-options summary").click()
        self.css("#pg-temperature").clear()
        self.css("#pg-temperature").send_keys("0")
        self.css("#pg-max-tokens").clear()
        self.css("#pg-max-tokens").send_keys("24")
        self.css("#pg-input").send_keys("What color is the sky on a clear day?")
        self.css("#pg-send").click()
        self.wait_for("both answers", lambda: all(c.get_attribute("data-state") == "done" for c in self.all(".pg-column")))
        column = self.css(f".pg-column[data-model='{adapter}']")
        answer = column.find_element("css selector", ".msg.assistant").text
        self.assertTrue(answer.strip(), column.text)
        self.assertIn("tokens", column.find_element("css selector", ".pg-meta").text)
        from selenium.webdriver.support.ui import Select
        # Structured output: a schema every column must follow (bounded, so max_tokens cannot cut it).
        Select(self.css("#pg-format")).select_by_value("json_schema")
        schema = {"type": "object", "properties": {"color": {"enum": ["blue", "green", "red"]}, "sure": {"type": "boolean"}},
                  "required": ["color", "sure"]}
        self.css("#pg-schema").clear()
        self.css("#pg-schema").send_keys(json.dumps(schema))
        self.css("#pg-max-tokens").clear()
        self.css("#pg-max-tokens").send_keys("64")
        self.css("#pg-input").send_keys("Answer with the color of the sky.")
        self.css("#pg-send").click()
        self.wait_for("the JSON answers", lambda: all(len(c.find_elements("css selector", ".msg.assistant")) == 2 and
                                                      c.get_attribute("data-state") == "done" for c in self.all(".pg-column")))
        for c in self.all(".pg-column"):
            text = c.find_elements("css selector", ".msg.assistant")[1].text
            self.assertIn("finish: stop", c.find_element("css selector", ".pg-meta").text, text)
            value = json.loads(text)
            self.assertEqual(set(value), {"color", "sure"}, text)
            self.assertIn(value["color"], schema["properties"]["color"]["enum"])
            self.assertIn("valid JSON", c.find_element("css selector", ".pg-meta").text)
        self.assertEqual(self.error_texts(), [])
        self.shot("playground")


def main():
    # --screenshots is ours; the rest (--brioche, --model, unittest's) goes on to e2e_main.
    global SCREENSHOTS
    import argparse
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--screenshots", default="")
    ours, rest = parser.parse_known_args()
    SCREENSHOTS = ours.screenshots
    sys.argv = [sys.argv[0], *rest]
    try:
        import selenium  # noqa: F401
    except ImportError as e:
        print(f"SKIP workbench_web: {e} (pip install selenium; scripts/setup.sh does)")
        return SKIP
    if not find_browser():
        print("SKIP workbench_web: chromium and chromedriver not found (apt-get install chromium chromium-driver)")
        return SKIP
    return e2e_main("workbench_web", globals())


if __name__ == "__main__":
    sys.exit(main())
