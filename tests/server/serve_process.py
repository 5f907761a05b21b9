"""A `brioche serve` child process for the e2e tests, and plain HTTP helpers."""
import argparse
import http.client
import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

DEFAULT_MODEL = os.path.expanduser("~/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf")
SKIP = 77  # CTest: SKIP_RETURN_CODE


def e2e_main(name, module_globals, needs=()):
    """Parses --brioche and --model into module_globals["ARGS"], skips (exit
    77, saying why) when the model, the binary or a module in `needs` is
    missing, and runs the module's unittest cases; returns the exit code."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--brioche", default=os.environ.get("BRIOCHE_BIN", "build/cpu/brioche"))
    parser.add_argument("--model", default=os.environ.get("BRIOCHE_MODEL", DEFAULT_MODEL))
    args, rest = parser.parse_known_args()
    for module in needs:
        try:
            importlib.import_module(module)
        except ImportError as e:
            print(f"SKIP {name}: {e}")
            return SKIP
    for path, what in [(args.model, "model"), (args.brioche, "binary")]:
        if not os.path.exists(path):
            print(f"SKIP {name}: {what} {path} not found")
            return SKIP
    module_globals["ARGS"] = args
    result = unittest.main(module=module_globals["__name__"], argv=[sys.argv[0], *rest], exit=False, verbosity=2).result
    return 0 if result.wasSuccessful() else 1


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Server:
    def __init__(self, brioche, model, *extra, threads=1):
        self.port = free_port()
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([brioche, "serve", "-m", model, "--port", str(self.port), "--ctx", "2048",
                                      "-t", str(threads), *extra], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"brioche serve exited with {self.proc.returncode}: {self.output()}")
            try:
                if self.get("/health")[0] == 200:
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("brioche serve did not become healthy: " + self.output())

    def output(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def request(self, method, path, body=None, headers=None, timeout=120):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = body if isinstance(body, (bytes, type(None))) else body.encode()
            conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
            r = conn.getresponse()
            return r.status, r.read().decode(errors="replace")
        finally:
            conn.close()

    def get(self, path, timeout=5):
        return self.request("GET", path, timeout=timeout)

    def post(self, path, body, timeout=300):
        return self.request("POST", path, body if isinstance(body, (str, bytes)) else json.dumps(body), timeout=timeout)

    def raw(self, data, half_close=False, timeout=30):
        """Sends raw bytes; returns what comes back until the server closes or goes quiet."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
            s.sendall(data)
            if half_close:
                s.shutdown(socket.SHUT_WR)
            got = b""
            try:
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    got += chunk
                    if not half_close and b"\r\n\r\n" in got and len(got) > 20:
                        head, _, rest = got.partition(b"\r\n\r\n")
                        length = [int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")]
                        if length and len(rest) >= length[0]:
                            break
            except socket.timeout:
                pass
            return got

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
