#!/usr/bin/env python3
"""Every test CTest runs through a script (Python, Node, a shell line) must be
registered with SKIP_RETURN_CODE 77: those scripts print "SKIP <name>: ..."
and exit 77 when an optional package, the model or a browser is missing, and
without the property CTest reports that exit as a failure, or, where a script
exits 0 after skipping, as a pass. GoogleTest binaries (test_<layer>) report
skips through GTEST_SKIP and are not checked.

    skip_codes_test.py --ctest CTEST --build-dir DIR
"""
import argparse
import json
import os
import subprocess
import sys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ctest", required=True)
    parser.add_argument("--build-dir", required=True)
    args = parser.parse_args()
    out = subprocess.run([args.ctest, "--show-only=json-v1"], cwd=args.build_dir, capture_output=True, text=True,
                         check=True).stdout
    tests = json.loads(out)["tests"]
    scripted, missing = [], []
    for test in tests:
        command = test.get("command") or []
        if not command or os.path.basename(command[0]).startswith("test_"):
            continue  # a GoogleTest binary
        scripted.append(test["name"])
        props = {p["name"]: p["value"] for p in test.get("properties", [])}
        if str(props.get("SKIP_RETURN_CODE")) != "77":
            missing.append(f"{test['name']} ({' '.join(os.path.basename(c) for c in command[:2])}): "
                           f"SKIP_RETURN_CODE is {props.get('SKIP_RETURN_CODE')}, expected 77")
    if not scripted:
        print(f"skip_codes: expected script-run tests in {args.build_dir}, found none among {len(tests)} tests")
        return 1
    for line in missing:
        print("skip_codes: " + line)
    print(f"skip_codes: {len(scripted) - len(missing)} of {len(scripted)} script-run tests report exit 77 as skipped")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
