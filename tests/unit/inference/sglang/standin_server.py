"""A stand-in for an SGLang server in the process tests: takes the launch flags, answers GET
/health_generate with 200 on --host:--port, and says on stderr that it serves. Run as a script
(`python standin_server.py --host ... --port ...`): it is a real process behind real HTTP, minus
the model, so the lifecycle tests do not each pay for loading one."""

from __future__ import annotations

import argparse
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health_generate" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format, *args):  # quiet: the log is for the test's own lines
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args, _ = parser.parse_known_args()
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    print(f"standin serving on {args.host}:{args.port}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
