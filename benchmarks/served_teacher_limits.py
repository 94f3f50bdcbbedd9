"""What a misbehaving OpenAI-compatible server costs the `openai` teacher, against a loopback
server: peak memory for 44 answers of 10 MB each (the teacher, which reads a body up to its cap,
beside the openai client reading each body whole, as the teacher did before), and how long a
server that drips its answer a byte at a time keeps a request (deadline vs. the bound).

    python -m benchmarks.served_teacher_limits

Each side runs in its own process, so that its peak RSS is its own.
"""

from __future__ import annotations

import contextlib
import json
import resource
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ANSWERS, ANSWER_BYTES = 44, 10_000_000


class _Huge(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        if self.path.endswith("drip/v1/chat/completions"):
            return self._drip()
        body = json.dumps({"model": "m", "choices": [{"message": {"content": "a" * ANSWER_BYTES},
                                                       "finish_reason": "stop"}]}).encode()  # fmt: skip
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(OSError):  # the teacher stopped reading at its cap
            self.wfile.write(body)

    def _drip(self):
        try:
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
            for _ in range(1000):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.5)
        except OSError:
            pass

    def log_message(self, *args):
        pass


def _side(side: str, url: str) -> None:
    """One side in this process: print its peak RSS in MB (the growth counts from after the
    imports)."""
    from concurrent.futures import ThreadPoolExecutor

    from openai import OpenAI

    from pipeline.teach.labels.tasks import Prompt
    from pipeline.teach.teachers.openai_api import OpenAITeacher

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if side == "teacher":
        teacher = OpenAITeacher(url, "m", "r", None, 60.0, 0, 0.0, 8, 8, False)
        prompt = Prompt(
            "judge", "MountainCar-v0", "s", "u", b"\x89PNG", {}, {"type": "discrete", "n": 3}
        )
        replies = teacher.answer([prompt] * ANSWERS)
        kept = sum(len(r.text or "") for r in replies)
    else:
        client = OpenAI(base_url=url, api_key="none", max_retries=0)

        def ask(_):
            r = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "u"}]
            )
            return r.choices[0].message.content

        with ThreadPoolExecutor(8) as pool:
            kept = sum(len(t) for t in pool.map(ask, range(ANSWERS)))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {"peak_mb": peak / 1024, "growth_mb": (peak - before) / 1024, "kept_chars": kept}
        )
    )


def main() -> None:
    if len(sys.argv) == 3:
        return _side(sys.argv[1], sys.argv[2])
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Huge)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    print(f"{ANSWERS} answers of {ANSWER_BYTES / 1e6:.0f} MB, 8 in flight:")
    rows = {}
    for side in ("teacher", "whole-body"):
        out = subprocess.run([sys.executable, "-m", "benchmarks.served_teacher_limits", side, url],
                             capture_output=True, text=True, check=True)  # fmt: skip
        rows[side] = json.loads(out.stdout.strip().splitlines()[-1])
        r = rows[side]
        print(f"  {side:10s} peak RSS {r['peak_mb']:7.0f} MB (+{r['growth_mb']:.0f} MB while "
              f"answering), {r['kept_chars']:,} characters kept")  # fmt: skip
    ratio = rows["whole-body"]["growth_mb"] / max(rows["teacher"]["growth_mb"], 1.0)
    print(f"  growth ratio whole-body / teacher: {ratio:.1f}x")

    from pipeline.teach.labels.tasks import Prompt
    from pipeline.teach.teachers.openai_api import OpenAITeacher

    timeout_s, retries, backoff = 3.0, 2, 0.5
    teacher = OpenAITeacher(url.replace("/v1", "/drip/v1"), "m", "r", None, timeout_s, retries,
                            backoff, 1, 8, False)  # fmt: skip
    started = time.perf_counter()
    (reply,) = teacher.answer(
        [Prompt("judge", "MountainCar-v0", "s", "u", b"\x89PNG", {}, {"type": "discrete", "n": 3})]
    )
    took = time.perf_counter() - started
    bound = timeout_s * (retries + 1) + backoff * (2**retries - 1)
    print(f"a byte every 0.5 s, timeout_s={timeout_s}, max_retries={retries}, backoff_s={backoff}: "
          f"{reply.error} after {took:.1f} s (bound {bound:.1f} s), {reply.attempts} attempts")  # fmt: skip
    server.shutdown()


if __name__ == "__main__":
    main()
