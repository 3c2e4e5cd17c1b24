"""A local HTTP server (127.0.0.1 only) that speaks the OpenAI chat-completions and the Anthropic messages
protocols and answers from a script, for driving the real SDKs in tests."""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PROBLEM_RE = re.compile(r"problem `([^`]+)`")


class FakeLLM:
    """script: problem id -> list of actions, used in call order per problem (the last one repeats).
    An action: {"text": str} | {"status": int} (an error) | {"malformed": True} | {"sleep": s, ...}."""

    def __init__(self, script: dict[str, list[dict]] | None = None):
        self.script = script or {}
        self.calls: list[dict] = []  # {"path", "problem", "auth", "body"}
        self._lock = threading.Lock()
        self._per_problem: dict[str, int] = {}
        self.inflight = self.max_inflight = 0  # requests being answered now / at most at once
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                user = body["messages"][-1]["content"]
                if isinstance(user, list):
                    user = " ".join(part.get("text", "") for part in user)
                m = PROBLEM_RE.search(user)
                problem = m.group(1) if m else "?"
                with fake._lock:
                    n = fake._per_problem.get(problem, 0)
                    fake._per_problem[problem] = n + 1
                    fake.calls.append(
                        {
                            "path": self.path,
                            "problem": problem,
                            "auth": self.headers.get("authorization") or self.headers.get("x-api-key"),
                            "body": body,
                        }
                    )
                    fake.inflight += 1
                    fake.max_inflight = max(fake.max_inflight, fake.inflight)
                self._answered = False
                try:
                    self._answer(body, problem, n)
                finally:
                    self._done()

            def _done(self):
                """The request leaves the in-flight count once, before its answer is written: a client that
                sends its next request on reading the answer must not find this one still counted."""
                if not self._answered:
                    self._answered = True
                    with fake._lock:
                        fake.inflight -= 1

            def _answer(self, body, problem, n):
                actions = fake.script.get(problem) or [{"text": "no script for this problem"}]
                act = actions[min(n, len(actions) - 1)]
                if act.get("sleep"):
                    time.sleep(act["sleep"])
                if act.get("status"):
                    return self._send(
                        act["status"],
                        {"error": {"message": "scripted error", "type": "x"}},
                        {"retry-after": "0"},
                    )
                if act.get("malformed"):
                    return self._send(200, None, raw=b"{this is not json")
                text = act["text"]
                if self.path.endswith("/chat/completions"):
                    payload = {
                        "id": "chatcmpl-1",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body["model"],
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "stop",
                                "message": {"role": "assistant", "content": text},
                            }
                        ],
                        "usage": {"prompt_tokens": 1000, "completion_tokens": 200, "total_tokens": 1200},
                    }
                elif self.path.endswith("/messages"):
                    payload = {
                        "id": "msg_1",
                        "type": "message",
                        "role": "assistant",
                        "model": body["model"],
                        "content": [{"type": "text", "text": text}],
                        "stop_reason": "end_turn",
                        "stop_sequence": None,
                        "usage": {"input_tokens": 1000, "output_tokens": 200},
                    }
                else:
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                self._send(200, payload)

            def _send(self, status, payload, headers=None, raw=None):
                data = raw if raw is not None else json.dumps(payload).encode()
                self._done()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
