#!/usr/bin/env python3
"""The web UI's files as the binary serves them (no browser): every embedded
asset with its content type, ETag and Cache-Control, 304 on a matching
If-None-Match, Chart.js from Debian's libjs-chart.js, no path leaving the
asset table, and --web-dir files served before the embedded ones.

Run: python3 tests/web/assets_test.py --brioche build/cpu/brioche
Exits 77 (CTest: skipped) when the model or the binary is missing.
"""
import http.client
import os
import re
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
WEB = os.path.normpath(os.path.join(HERE, "..", "..", "web"))
sys.path.insert(0, os.path.join(HERE, "..", "server"))
from serve_process import Server, e2e_main  # noqa: E402

ARGS = None
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}


def fetch(port, path, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def web_files():
    for root, _, names in os.walk(WEB):
        for name in names:
            path = os.path.join(root, name)
            yield "/" + os.path.relpath(path, WEB).replace(os.sep, "/"), path


class EmbeddedAssets(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # Its own --data-dir: the default one is locked by whichever server opens it first.
        cls.data = tempfile.mkdtemp(prefix="brioche-assets-")
        cls.server = Server(ARGS.brioche, ARGS.model, "--api-key", "k", "--data-dir", cls.data)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.data, ignore_errors=True)

    def test_every_web_file_is_served_as_built(self):
        for url, path in web_files():
            status, headers, body = fetch(self.server.port, url)
            self.assertEqual(status, 200, url)
            with open(path, "rb") as f:
                self.assertEqual(body, f.read(), f"{url}: the binary serves another version (rebuild)")
            self.assertEqual(headers["content-type"], TYPES[os.path.splitext(url)[1]], url)
            self.assertEqual(headers["cache-control"], "no-cache", url)
            self.assertEqual(headers["x-content-type-options"], "nosniff", url)
            self.assertRegex(headers["etag"], r'^"[0-9a-f]{20}"$', url)

    def test_root_is_index_and_needs_no_key(self):
        status, _, body = fetch(self.server.port, "/")
        self.assertEqual(status, 200)
        with open(os.path.join(WEB, "index.html"), "rb") as f:
            self.assertEqual(body, f.read())
        self.assertEqual(fetch(self.server.port, "/v1/models")[0], 401)

    def test_chart_js_comes_from_the_debian_package(self):
        status, headers, body = fetch(self.server.port, "/lib/chart.umd.js")
        self.assertEqual(status, 200)
        self.assertEqual(headers["content-type"], "text/javascript")
        self.assertIn(b"Chart.js v", body[:400])
        # Every script and stylesheet the page names is served.
        _, _, index = fetch(self.server.port, "/")
        for ref in re.findall(rb'(?:src|href)="([^"#:]+)"', index):
            self.assertEqual(fetch(self.server.port, "/" + ref.decode())[0], 200, ref)

    def test_etag_revalidates(self):
        _, headers, _ = fetch(self.server.port, "/js/app.js")
        etag = headers["etag"]
        for header in [etag, f"W/{etag}", f'"other", {etag}', "*"]:
            status, again, body = fetch(self.server.port, "/js/app.js", {"If-None-Match": header})
            self.assertEqual((status, body), (304, b""), header)
            self.assertEqual(again["etag"], etag)
        self.assertEqual(fetch(self.server.port, "/js/app.js", {"If-None-Match": '"0000"'})[0], 200)

    def test_no_path_leaves_the_assets(self):
        for path in ["/../../etc/passwd", "//etc/passwd", "/js/../../etc/passwd", "/%2e%2e/etc/passwd", "/js/", "/js",
                     "/index.html/..", "/lib/", "/lib/chart.js", "/JS/APP.JS", "/index.html%00", "/" + "a/" * 2000]:
            status, headers, body = fetch(self.server.port, path)
            self.assertEqual(status, 404, path)
            self.assertIn(b'"error"', body)
        self.assertTrue(self.server.alive())


class WebDirOverride(unittest.TestCase):
    def test_web_dir_files_first_then_embedded(self):
        tmp = tempfile.mkdtemp(prefix="brioche-webdir-")
        try:
            with open(os.path.join(tmp, "index.html"), "w") as f:
                f.write("<p>development copy</p>")
            server = Server(ARGS.brioche, ARGS.model, "--web-dir", tmp, "--data-dir", os.path.join(tmp, "data"))
            try:
                status, headers, body = fetch(server.port, "/")
                self.assertEqual((status, body), (200, b"<p>development copy</p>"))
                self.assertTrue(headers["etag"].startswith('"d'))
                self.assertEqual(fetch(server.port, "/", {"If-None-Match": headers["etag"]})[0], 304)
                # What the folder lacks comes from the binary.
                self.assertEqual(fetch(server.port, "/lib/chart.umd.js")[0], 200)
                self.assertEqual(fetch(server.port, "/js/app.js")[0], 200)
            finally:
                server.stop()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(e2e_main("web_assets", globals()))
