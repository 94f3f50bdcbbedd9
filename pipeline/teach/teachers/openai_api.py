"""Any OpenAI-compatible chat-completions server as teacher (vLLM, `transformers serve`, ...).

Frames go as base64 PNG data URLs; requests run concurrently up to `concurrency`, each with an
explicit timeout and bounded retries with exponential backoff on timeouts, connection errors, 429
and 5xx. A request that never gets an answer becomes a reply with status `timeout` or
`http_error` (recorded, not cached). `finish_reason == "length"` is reported as truncation.
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
import logging
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from pipeline.teach.labels.schema import label_schema
from pipeline.teach.labels.status import TRANSPORT_FAILURES, ParseStatus
from pipeline.teach.labels.tasks import Prompt
from pipeline.teach.teachers.base import Reply, TeacherUnavailableError

log = logging.getLogger(__name__)
# not one INFO line per request, whichever HTTP client the openai package brings (httpx, or its
# fork httpx2, which logs under its own name)
for _client in ("httpx", "httpx2"):
    logging.getLogger(_client).setLevel(logging.WARNING)

_RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}
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
        where: str = "<teacher>.openai",
    ) -> None:
        """`where`: the params.yaml path of these settings, for messages."""
        from openai import OpenAI

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
        self._client = OpenAI(
            base_url=base_url, api_key=api_key or "none", timeout=timeout_s, max_retries=0
        )
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
            served = [m.id for m in self._client.models.list().data]
        except openai.APITimeoutError:
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

    def _ask_once(self, prompt: Prompt) -> Reply:
        import openai

        request = self._request(prompt)
        error, detail = ParseStatus.HTTP_ERROR, ""
        started = time.perf_counter()
        for attempt in range(1, self.max_retries + 2):
            try:
                response = self._client.chat.completions.create(**request)
            except openai.APITimeoutError as exc:
                error, detail = ParseStatus.TIMEOUT, f"no answer within the timeout ({exc})"
            except openai.APIConnectionError as exc:
                error, detail = ParseStatus.HTTP_ERROR, f"cannot reach {self.base_url}: {exc}"
            except openai.APIStatusError as exc:
                error, detail = ParseStatus.HTTP_ERROR, f"HTTP {exc.status_code}: {exc.message}"
                if exc.status_code not in _RETRY_STATUS:
                    return Reply(None, None, error, detail, time.perf_counter() - started, attempt)
            except ValueError as exc:  # invalid UTF-8, not JSON: the body is no answer to read
                detail = f"the server's body is not a JSON completion ({type(exc).__name__}: {exc})"
                return Reply(None, None, ParseStatus.HTTP_ERROR, detail[:500],
                             time.perf_counter() - started, attempt)  # fmt: skip
            else:
                choice = response.choices[0]
                usage = getattr(response, "usage", None)
                return Reply(
                    text=choice.message.content or "",
                    finish_reason=choice.finish_reason,
                    latency_s=time.perf_counter() - started,
                    attempts=attempt,
                    # the server's build (vLLM, OpenAI): recorded with the answer where given
                    system_fingerprint=getattr(response, "system_fingerprint", None),
                    prompt_tokens=getattr(usage, "prompt_tokens", None),
                    completion_tokens=getattr(usage, "completion_tokens", None),
                )
            if attempt <= self.max_retries:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
        return Reply(None, None, error, detail, time.perf_counter() - started, self.max_retries + 1)

    def answer(self, prompts: Sequence[Prompt]) -> list[Reply]:
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(self._ask, prompts))
