"""A stand-in for SGLang's and vLLM's HTTP servers, for the frameworks
runbook's own test (test_hw_runbook.py): answers /health, SGLang's /generate
(meta_info with cached_tokens_details) and vLLM's /v1/completions and
/metrics (vllm:external_prefix_cache_hits), as those releases do.

    fake_framework.py --kind sglang|vllm --port N [anything else, ignored]

FAKE_STORAGE_HITS (default 2944) is the store hits it reports; with
FAKE_EXIT set it exits at once, as a framework that failed to start."""

import json
import os
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

if os.environ.get("FAKE_EXIT"):
    sys.exit(3)
PORT = int(sys.argv[sys.argv.index("--port") + 1])
HITS = int(os.environ.get("FAKE_STORAGE_HITS", "2944"))


class Handler(BaseHTTPRequestHandler):
    def reply(self, body: bytes) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            return self.reply(b"")
        return self.reply(b'vllm:external_prefix_cache_hits_total{engine="0",model_name="m"} %d.0\n' % HITS)

    def do_POST(self):
        json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/generate":
            details = {"device": 0, "host": 0, "storage": HITS, "storage_backend": "dynamic"}
            out = {"text": " A summary.", "meta_info": {"prompt_tokens": 3000, "cached_tokens_details": details}}
        else:
            out = {"choices": [{"text": " A summary."}]}
        self.reply(json.dumps(out).encode())

    def log_message(self, *args):
        pass


HTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
