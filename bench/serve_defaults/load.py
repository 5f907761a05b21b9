import json, sys, urllib.request, concurrent.futures, time
port, label = sys.argv[1], sys.argv[2]
def one(i):
    b = json.dumps({"messages": [{"role": "user", "content": "story %d" % i}], "max_tokens": 256,
                    "temperature": 1.0, "ignore_eos": True}).encode()
    r = urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", b, {"Content-Type": "application/json"}))
    return json.loads(r.read())["usage"]["completion_tokens"]
t = time.time()
with concurrent.futures.ThreadPoolExecutor(64) as p:
    n = sum(p.map(one, range(64)))
dt = time.time() - t
print(f"{label}: 64 requests x 256 tokens: {n} tokens in {dt:.1f} s = {n/dt:.0f} tok/s")
