"""Any OpenAI-compatible chat-completions server as teacher (vLLM, `transformers serve`, ...).

Frames go as base64 PNG data URLs; requests run concurrently up to `concurrency`, each within a
deadline (`timeout_s` for connecting, sending and every byte of the answer: deadline.py) and with
bounded retries with exponential backoff on timeouts, connection errors, 429 and 5xx. A request
that never gets an answer becomes a reply with status `timeout` or `http_error` (recorded, not
cached). `finish_reason == "length"` is reported as truncation.

A body is read up to `BODY_CAP` bytes and no further: a longer one is an answer too long to read
(`too_long`, its first bytes and size kept). A 200 whose JSON holds no text answer (no choices, a
content that is a number or a list) is `malformed_completion`, a transport failure like the two
above. A completion that names another model than `model` (`model@<revision>`, as `transformers
serve` reports it, included) or one of `served_models` stops the stage: its answers would be
cached under this teacher's id.
With `json_schema`, a JSON-schema `response_format` asks the server for structured output (vLLM
supports it); the parsers read JSON objects and the `key: value` text format alike.

Before its first request a stage calls `probe`: one GET of the server's model list, whose
failure names the setting to fix (unreachable: `base_url`; HTTP 401/403: `api_key_env`; no
answer: `timeout_s`; another model served: `model`). A circuit breaker stops the stage after
`max_consecutive_failures` requests in a row got no answer. httpx's one log line per request is
silenced.

The API key never leaves this object: a server (or proxy) that echoes it back, in an error
message or an answer, has it replaced by `<api key>` before the text is recorded anywhere. A body
that is not a JSON completion (an HTML error page, invalid UTF-8) is an `http_error` row.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import httpx2

from pipeline.teach.labels.parsers import CLIP_KEEP_CHARS, MAX_ANSWER_CHARS, clip_answer
from pipeline.teach.labels.schema import label_schema
from pipeline.teach.labels.status import TRANSPORT_FAILURES, ParseStatus
from pipeline.teach.labels.tasks import Prompt
from pipeline.teach.teachers.base import Reply, TeacherUnavailableError
from pipeline.teach.teachers.deadline import deadline, deadline_transport

log = logging.getLogger(__name__)
# not one INFO line per request, whichever HTTP client the openai package brings (httpx, or its
# fork httpx2, which logs under its own name)
for _client in ("httpx", "httpx2"):
    logging.getLogger(_client).setLevel(logging.WARNING)

_RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}
# The most of a completion's body that is read: a longest readable answer JSON-escaped (up to 6
# bytes a character) plus the envelope. A longer body is refused as too_long, unread past here.
BODY_CAP = 6 * MAX_ANSWER_CHARS + 65_536
API_KEY_REDACTED = "<api key>"


def response_schema(prompt: Prompt) -> dict[str, Any]:
    """The JSON schema of the answer to `prompt`'s task."""
    schema = label_schema(prompt.env_id)
    if prompt.task == "action":
        if schema.action_choices is not None:
            props: dict[str, Any] = {schema.action_names[0]: {"enum": list(schema.action_choices)}}
        else:
            props = {name: {"type": "number"} for name in schema.action_names}
    elif prompt.task == "milestone":
        props = {"milestone": {"enum": list(schema.milestones)}}
    elif prompt.task == "objects":
        props = {"objects": {"type": "array", "items": {"type": "string"}}}
    else:
        props = {"reasonable": {"enum": ["yes", "no"]}}
    return {
        "type": "json_schema",
        "json_schema": {
            "name": f"{prompt.task}_answer",
            "schema": {"type": "object", "properties": props, "required": list(props)},
        },
    }


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _completion_answer(completion: Any) -> tuple[str, str, str | None]:
    """(problem, content, finish_reason) of a chat completion: `problem` is "" when its first
    choice holds a text answer (a null content is the empty answer), else what is wrong."""
    if not isinstance(completion, dict):
        return f"a JSON {type(completion).__name__}, not a completion object", "", None
    choices = completion.get("choices")
    if not isinstance(choices, list) or not choices:
        return f"choices is {json.dumps(choices)[:40]}, not a list of choices", "", None
    choice = choices[0]
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        return "the first choice has no message object", "", None
    content, finish = message.get("content"), choice.get("finish_reason")
    if content is not None and not isinstance(content, str):
        return f"the message content is a JSON {type(content).__name__}, not text", "", None
    return "", content or "", finish if isinstance(finish, str) else None


class OpenAITeacher:
    def __init__(
        self,
        base_url: str,
        model: str,
        revision: str,
        api_key_env: str | None,
        timeout_s: float,
        max_retries: int,
        backoff_s: float,
        concurrency: int,
        max_tokens: int,
        json_schema: bool,
        max_consecutive_failures: int = 16,
        served_models: Sequence[str] = (),
        where: str = "<teacher>.openai",
    ) -> None:
        """`where`: the params.yaml path of these settings, for messages."""
        from openai import DefaultHttpxClient, OpenAI

        api_key = os.environ.get(api_key_env, "") if api_key_env else ""
        if api_key_env and not api_key:
            raise TeacherUnavailableError(
                f"environment variable {api_key_env} ({where}.api_key_env) is not set: export "
                "the API key in it, or set api_key_env to null for a server without keys"
            )
        self.where, self.timeout_s, self.api_key_env = where, timeout_s, api_key_env
        self.max_consecutive_failures = max_consecutive_failures
        self._failures_in_a_row, self._tripped = 0, ""
        self._lock = threading.Lock()
        # Retries are ours (counted per row), so the client's own are off.
        self._api_key = api_key
        # every request within its deadline (deadline.py): httpx alone waits timeout_s per read
        self._client = OpenAI(
            base_url=base_url, api_key=api_key or "none", timeout=timeout_s, max_retries=0,
            http_client=DefaultHttpxClient(transport=deadline_transport()),
        )  # fmt: skip
        self.served_models = frozenset(served_models)
        self.base_url, self.model = base_url, model
        self.max_retries, self.backoff_s, self.concurrency = max_retries, backoff_s, concurrency
        self.json_schema = json_schema
        # The server URL is not part of the id: the same weights served elsewhere give the same
        # answers; the revision is, since a name alone may serve other weights tomorrow.
        self.teacher_id = f"openai:{model}@{revision}"
        self.decoding: dict[str, Any] = {
            "temperature": 0.0,
            "max_tokens": max_tokens,
            "json_schema": json_schema,
        }

    def _request(self, prompt: Prompt) -> dict[str, Any]:
        data_url = "data:image/png;base64," + base64.b64encode(prompt.frame_png).decode()
        request: dict[str, Any] = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": prompt.system},
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": data_url}},
                        {"type": "text", "text": prompt.user},
                    ],
                },
            ],
            "temperature": self.decoding["temperature"],
            "max_tokens": self.decoding["max_tokens"],
        }
        if self.json_schema:
            request["response_format"] = response_schema(prompt)
        return request

    def _redact(self, text: str) -> str:
        """`text` without the API key (keys shorter than 8 characters are not secrets, and
        replacing them would change ordinary answers)."""
        if len(self._api_key) < 8:
            return text
        return text.replace(self._api_key, API_KEY_REDACTED)

    def probe(self) -> None:
        """One GET of the server's model list; raises TeacherUnavailableError naming the setting
        to fix. A server whose model list fails otherwise (404, 5xx) is not checked further."""
        import openai

        where, url = self.where, self.base_url
        try:
            with deadline(self.timeout_s):
                served = [m.id for m in self._client.models.list().data]
        except (openai.APITimeoutError, httpx2.TimeoutException):
            raise TeacherUnavailableError(
                f"{url} did not answer within {self.timeout_s} s ({where}.timeout_s): is it "
                "overloaded or hung? A slow model may need a larger timeout_s"
            ) from None
        except openai.APIConnectionError as exc:
            raise TeacherUnavailableError(
                f"cannot reach {url} ({where}.base_url): is the server running, and is the URL "
                f"right (up to /v1)? ({self._redact(str(exc))})"
            ) from None
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            key = (
                f"the key in ${self.api_key_env} ({where}.api_key_env)"
                if self.api_key_env
                else f"no key: set {where}.api_key_env to the variable that holds one"
            )
            raise TeacherUnavailableError(
                f"{url} refused the request (HTTP {exc.status_code}): it was sent {key}"
            ) from None
        except openai.APIStatusError as exc:
            # no usable model list (404/405/501: none; `transformers serve` offline: 500): the
            # server is up and authorised us; the requests themselves will say the rest
            log.warning(
                "%s answered HTTP %d to GET /models: the served model is not checked",
                url, exc.status_code,
            )  # fmt: skip
            return
        except ValueError as exc:  # not JSON: not an OpenAI-compatible API at that URL
            raise TeacherUnavailableError(
                f"{url} does not answer as an OpenAI-compatible API ({where}.base_url should end "
                f"in /v1): {type(exc).__name__}"
            ) from None
        if served and self.model not in served:
            raise TeacherUnavailableError(
                f"{url} serves {served[:5]}, not {self.model!r} ({where}.model)"
            )

    def _ask(self, prompt: Prompt) -> Reply:
        if self._tripped:  # the rest of a batch after the breaker tripped: not sent
            raise TeacherUnavailableError(self._tripped)
        reply = self._ask_once(prompt)
        with self._lock:
            if reply.error in TRANSPORT_FAILURES:
                self._failures_in_a_row += 1
                if self._failures_in_a_row >= self.max_consecutive_failures and not self._tripped:
                    self._tripped = (
                        f"{self._failures_in_a_row} requests in a row to {self.base_url} got no "
                        f"answer (last: {reply.error}: {self._redact(reply.error_detail)[:300]}); "
                        f"stopped by {self.where}.max_consecutive_failures. Earlier batches' "
                        "answers are cached: rerun once the server answers"
                    )
            else:
                self._failures_in_a_row = 0
        if self._tripped:
            raise TeacherUnavailableError(self._tripped)
        if reply.text is None:
            return replace(reply, error_detail=self._redact(reply.error_detail))
        return replace(reply, text=self._redact(reply.text))

    def _post(self, request: dict[str, Any]) -> tuple[bytes, int]:
        """POST one completion request within the deadline; the body's first `BODY_CAP` bytes
        and how many bytes were read (`BODY_CAP + 1` or more: the rest was never read)."""
        with deadline(self.timeout_s):
            create = self._client.chat.completions.with_streaming_response.create
            with create(**request) as response:
                body, size = bytearray(), 0
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    body += chunk[: max(0, BODY_CAP - len(body))]
                    if size > BODY_CAP:
                        break  # the connection is closed with the response: nothing more read
        return bytes(body), size

    def _ask_once(self, prompt: Prompt) -> Reply:
        import openai

        request = self._request(prompt)
        error, detail = ParseStatus.HTTP_ERROR, ""
        started = time.perf_counter()
        for attempt in range(1, self.max_retries + 2):
            try:
                body, size = self._post(request)
            except (openai.APITimeoutError, httpx2.TimeoutException) as exc:
                error = ParseStatus.TIMEOUT
                detail = f"no answer within timeout_s={self.timeout_s} ({exc})"
            except (openai.APIConnectionError, httpx2.TransportError) as exc:
                error, detail = ParseStatus.HTTP_ERROR, f"cannot reach {self.base_url}: {exc}"
            except openai.APIStatusError as exc:
                error = ParseStatus.HTTP_ERROR
                detail = f"HTTP {exc.status_code}: {str(exc.message)[:500]}"
                if exc.status_code not in _RETRY_STATUS:
                    return Reply(None, None, error, detail, time.perf_counter() - started, attempt)
            else:
                return self._reply(body, size, time.perf_counter() - started, attempt)
            if attempt <= self.max_retries:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
        return Reply(None, None, error, detail, time.perf_counter() - started, self.max_retries + 1)

    def _reply(self, body: bytes, size: int, latency_s: float, attempts: int) -> Reply:
        """The reply a completion's body makes: its answer text, or a named status for a body
        that holds none (not JSON: http_error; no choices, a content that is not text:
        malformed_completion). A body over `BODY_CAP` is an answer too long to read: its first
        bytes and size are kept (too_long)."""
        if size > BODY_CAP:
            head = body[:CLIP_KEEP_CHARS].decode("utf-8", errors="replace")
            text = clip_answer(head, f"{BODY_CAP + 1:,} bytes or more")
            return Reply(text, "stop", latency_s=latency_s, attempts=attempts)

        def failed(status: ParseStatus, detail: str) -> Reply:
            return Reply(None, None, status, detail[:500], latency_s, attempts)

        try:
            completion = json.loads(body)
        except ValueError as exc:  # invalid UTF-8, not JSON: the body is no answer to read
            return failed(
                ParseStatus.HTTP_ERROR,
                f"the server's body is not a JSON completion ({type(exc).__name__}: {exc})",
            )
        problem, content, finish = _completion_answer(completion)
        if problem:
            return failed(ParseStatus.MALFORMED_COMPLETION, f"{problem}: {body[:200]!r}")
        served = completion.get("model")
        if served is not None and not isinstance(served, str):
            return failed(ParseStatus.MALFORMED_COMPLETION, f"the model id is {served!r:.80}")
        # `transformers serve` names the model `<model>@<revision>`: the same weights' id
        named = served is None or served.partition("@")[0] == self.model
        if not named and served not in self.served_models:
            raise TeacherUnavailableError(
                f"{self.base_url} answered as model {str(served)[:100]!r}, not {self.model!r} "
                f"({self.where}.model): its answers would be cached as {self.teacher_id}'s. Serve "
                f"{self.model!r}, or list {str(served)[:100]!r} in {self.where}.served_models if "
                "the server reports that id for the same weights"
            )
        usage = completion.get("usage") if isinstance(completion.get("usage"), dict) else {}
        fingerprint = completion.get("system_fingerprint")
        return Reply(
            text=content,
            finish_reason=finish,
            latency_s=latency_s,
            attempts=attempts,
            # the server's build (vLLM, OpenAI): recorded with the answer where given
            system_fingerprint=fingerprint if isinstance(fingerprint, str) else None,
            prompt_tokens=_count(usage.get("prompt_tokens")),
            completion_tokens=_count(usage.get("completion_tokens")),
        )

    def answer(self, prompts: Sequence[Prompt]) -> list[Reply]:
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(self._ask, prompts))
