"""Stand-in for SGLang's HTTP server in launcher tests (the real one needs GPUs).

Answers /health_generate with 503 until --ready-after seconds have passed (never with
--never-ready), then 200. On SIGTERM/SIGINT it writes the signal's name to
--signal-log and exits 0, as SGLang's graceful shutdown does.
"""

import argparse
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--ready-after", type=float, default=0.0)
parser.add_argument("--never-ready", action="store_true")
parser.add_argument("--exit-after", type=float, help="crash with code 7 after this many seconds")
parser.add_argument("--signal-log")
args, _unknown = parser.parse_known_args()
started = time.monotonic()


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        ready = not args.never_ready and time.monotonic() - started >= args.ready_after
        self.send_response(200 if ready and self.path == "/health_generate" else 503)
        self.end_headers()

    def log_message(self, *a):
        pass


server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)


def on_signal(signum, _frame):
    if args.signal_log:
        with open(args.signal_log, "a") as f:
            f.write(signal.Signals(signum).name + "\n")
    threading.Thread(target=server.shutdown).start()


signal.signal(signal.SIGTERM, on_signal)
signal.signal(signal.SIGINT, on_signal)
if args.exit_after is not None:
    threading.Timer(
        args.exit_after, lambda: (server.server_close(), sys.stdout.flush(), __import__("os")._exit(7))
    ).start()
server.serve_forever()
sys.exit(0)
