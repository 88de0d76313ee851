"""Run SGLang's own argument validation (sglang_validation_main.validate) on many requests in one process.

Reads {"case": request} as JSON on stdin, prints {"case": outcome} (each outcome as sglang_validation_main gives it).
SGLang and torch are imported once for all the cases, so tests can compare preflight's restated rules with SGLang's
own resolution over many generated settings. Run with the tree first on PYTHONPATH (and, for 0.5.23, the libraries
of tests/support/stack_libraries.py).
"""

import json
import sys

from sglang_eagle3.judging.sglang_validation_main import validate


def main():
    cases = json.load(sys.stdin)
    print("\n" + json.dumps({name: validate(request) for name, request in cases.items()}, default=repr))


if __name__ == "__main__":
    main()
