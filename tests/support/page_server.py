"""A loopback HTTP server serving exposition pages that a test can change or break while it runs.

Stands in for model servers and the EPP: real sockets and real HTTP, so sloscope's scrape loop
is exercised as in production. Pages are built from the recorded fixtures by the helpers below.
"""

from __future__ import annotations

import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"


class PageServer:
    """Serves ``page`` at every path; ``status`` other than 200 answers that status with no page."""

    def __init__(self, page: str, content_type: str = TEXT_FORMAT) -> None:
        self.page = page
        self.content_type = content_type
        self.status = 200
        self.requests = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.requests += 1
                body = owner.page.encode() if owner.status == 200 else b"unavailable\n"
                self.send_response(owner.status)
                self.send_header("Content-Type", owner.content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # quiet test output
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> PageServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def vllm_page(shared: Path, *, waiting: float | None = None, old_kv_name: bool = False) -> str:
    """The recorded vLLM 0.33 page, with its queue length changed or its KV-cache series under the pre-0.10 name."""
    page = (shared / "fixtures" / "vllm" / "metrics-vllm-0.33.0.txt").read_text()
    if waiting is not None:
        page, count = re.subn(
            r"^(vllm:num_requests_waiting\{[^}]*\}) \S+$", rf"\g<1> {waiting}", page, flags=re.MULTILINE
        )
        assert count == 1, "the fixture's waiting line changed shape"
    if old_kv_name:
        assert "vllm:kv_cache_usage_perc" in page
        page = page.replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
    return page


def sglang_page(model: str, *, queued: float, running: float, token_usage: float) -> str:
    """An SGLang-style page: its gauges, named as SGLang names them, among other families."""
    labels = f'model_name="{model}"'
    return (
        "# HELP sglang:num_running_reqs The number of running requests.\n"
        "# TYPE sglang:num_running_reqs gauge\n"
        f"sglang:num_running_reqs{{{labels}}} {running}\n"
        "# HELP sglang:num_queue_reqs The number of requests in the waiting queue.\n"
        "# TYPE sglang:num_queue_reqs gauge\n"
        f"sglang:num_queue_reqs{{{labels}}} {queued}\n"
        "# HELP sglang:token_usage The token usage.\n"
        "# TYPE sglang:token_usage gauge\n"
        f"sglang:token_usage{{{labels}}} {token_usage}\n"
        "# HELP sglang:gen_throughput The generation throughput (token/s).\n"
        "# TYPE sglang:gen_throughput gauge\n"
        f"sglang:gen_throughput{{{labels}}} 1234.5\n"
    )


def llmd_epp_page(shared: Path) -> str:
    """The EPP page constructed from llm-d-router's code at ebab6879 (fixtures/llm-d-router/epp-metrics.prom)."""
    return (shared / "fixtures" / "llm-d-router" / "epp-metrics.prom").read_text()


def without_families(page: str, *families: str) -> str:
    """``page`` without the HELP, TYPE and sample lines of ``families`` (comment lines are kept)."""
    names = "|".join(map(re.escape, families))
    line = re.compile(rf"^(# (HELP|TYPE) )?({names})(_bucket|_sum|_count|_total)?[ {{]")
    return "".join(kept for kept in page.splitlines(keepends=True) if not line.match(kept))


def llmd_epp_page_streaming_off(shared: Path) -> str:
    """The llm-d page as a default deployment with non-streaming clients writes it.

    The plugin's streamingMode is off by default (predictedlatency/plugin.go:266 @ebab6879), so it
    records no TPOT, actual or predicted (requestcontrol_hooks.go:151-185); the responses are not
    streamed, so the core TTFT carries streaming="false" and no streaming TPOT exists
    (pkg/epp/metrics/metrics.go:703-706, 718-720).
    """
    page = without_families(
        llmd_epp_page(shared),
        "llm_d_epp_request_predicted_tpot_seconds",
        "inference_objective_request_predicted_tpot_seconds",
        "inference_objective_request_tpot_seconds",
        "llm_d_epp_request_streaming_tpot_seconds",
    )
    return page.replace('streaming="true"', 'streaming="false"')
