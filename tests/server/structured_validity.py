#!/usr/bin/env python3
"""Structured-output validity run: every schema of tests/server/structured_schemas.json
through `brioche serve` with response_format json_schema (official openai client),
judged by the `jsonschema` package (Draft 2020-12, format checker on).

Run: python3 tests/server/structured_validity.py --brioche build/cpu/brioche
     [--url http://127.0.0.1:8080] [--limit N] [--concurrency 8] [--max-tokens 160]
     [--out results.json]

Counts: `valid` outputs parse and validate; `truncated` ones hit max_tokens
("length": a valid prefix, not a complete document); `invalid` ones finished
with "stop" but fail validation (the number that must be 0); `rejected` ones
got a 400 (strict schema with a feature the engine does not support). Exit
status 1 when any output is invalid or rejected.
"""
import argparse
import concurrent.futures
import json
import os
import sys
import time

import jsonschema

sys.path.insert(0, os.path.dirname(__file__))
DEFAULT_MODEL = os.path.expanduser("~/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf")
SCHEMAS = os.path.join(os.path.dirname(__file__), "structured_schemas.json")


def run_one(client, entry, max_tokens, any_whitespace, extra=None):
    import openai
    t0 = time.time()
    try:
        return request_one(client, entry, max_tokens, any_whitespace, t0, extra or {})
    except openai.BadRequestError as e:  # strict + unsupported schema feature: a named 400
        return {"id": entry["id"], "name": entry["name"], "finish": None, "tokens": 0, "seconds": round(time.time() - t0, 2),
                "warning": None, "text": "", "verdict": "rejected", "error": str(e)[:300]}


def request_one(client, entry, max_tokens, any_whitespace, t0, extra):
    r = client.chat.completions.with_raw_response.create(
        model="",
        messages=[{"role": "system", "content": "You answer with JSON only."},
                  {"role": "user", "content": entry["description"] + " Reply with one JSON value."}],
        max_tokens=max_tokens, temperature=0,
        response_format={"type": "json_schema",
                         "json_schema": {"name": entry["name"], "schema": entry["schema"], "strict": True,
                                         "any_whitespace": any_whitespace}},
        extra_body=extra)
    warning = r.headers.get("warning")
    c = r.parse()
    choice = c.choices[0]
    text = choice.message.content or ""
    result = {"id": entry["id"], "name": entry["name"], "finish": choice.finish_reason, "tokens": c.usage.completion_tokens,
              "seconds": round(time.time() - t0, 2), "warning": warning, "text": text}
    if choice.finish_reason == "length":
        result["verdict"] = "truncated"
        return result
    try:
        value = json.loads(text)
        jsonschema.Draft202012Validator(entry["schema"], format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER).validate(value)
        result["verdict"] = "valid"
    except (ValueError, jsonschema.ValidationError) as e:
        result["verdict"] = "invalid"
        result["error"] = str(e).splitlines()[0][:300]
    return result


def run_all(base_url, entries, concurrency, max_tokens, any_whitespace, extra=None, log=print):
    import openai
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="none", timeout=600, max_retries=0)
    results = []
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        futures = [pool.submit(run_one, client, e, max_tokens, any_whitespace, extra) for e in entries]
        for f in concurrent.futures.as_completed(futures):
            r = f.result()
            results.append(r)
            if r["verdict"] in ("invalid", "rejected") or r["warning"]:
                log(f"  {r['verdict']}: #{r['id']} {r['name']}: {r.get('error', '')} {r['warning'] or ''} {r['text'][:200]!r}")
    results.sort(key=lambda r: r["id"])
    summary = {k: sum(r["verdict"] == k for r in results) for k in ("valid", "truncated", "invalid", "rejected")}
    summary["total"] = len(results)
    summary["degraded"] = sum(bool(r["warning"]) for r in results)
    summary["completion_tokens"] = sum(r["tokens"] for r in results)
    summary["wall_seconds"] = round(time.time() - t0, 1)
    finished = summary["valid"] + summary["invalid"]
    summary["validity_of_finished"] = round(summary["valid"] / finished, 4) if finished else None
    return summary, results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--brioche", help="binary to start (`brioche serve`); not needed with --url")
    ap.add_argument("--model", default=os.environ.get("BRIOCHE_MODEL", DEFAULT_MODEL))
    ap.add_argument("--url")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--compact", action="store_true", help="any_whitespace false")
    ap.add_argument("--repetition-penalty", type=float, help="sent as the repetition_penalty extension field")
    ap.add_argument("--only-truncated-in", help="rerun only the schemas that were truncated in this earlier --out file")
    ap.add_argument("--out")
    args = ap.parse_args()
    entries = json.load(open(SCHEMAS))["schemas"]
    if args.only_truncated_in:
        again = {r["id"] for r in json.load(open(args.only_truncated_in))["results"] if r["verdict"] == "truncated"}
        entries = [e for e in entries if e["id"] in again]
    if args.limit:
        entries = entries[:args.limit]
    server = None
    url = args.url
    if not url:
        from server_e2e_test import ServerProcess
        import server_e2e_test
        server_e2e_test.ARGS = argparse.Namespace(brioche=args.brioche, model=args.model)
        server = ServerProcess()
        url = server.url
    try:
        summary, results = run_all(url, entries, args.concurrency, args.max_tokens, not args.compact,
                                   {"repetition_penalty": args.repetition_penalty} if args.repetition_penalty else None)
    finally:
        if server:
            server.stop()
    print(json.dumps(summary))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"summary": summary, "results": results}, f, indent=1)
    return 1 if summary["invalid"] or summary["rejected"] else 0


if __name__ == "__main__":
    sys.exit(main())
