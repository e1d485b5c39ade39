"""vLLM's OpenAI server as users run it (`python -m vllm.entrypoints.openai.api_server`, loopback only) with the
exported SmolLM2 drafter (and the same exported with `--hybrid`): concurrent chat and completion requests get the
plain server's greedy texts, the server's /metrics count accepted drafts, it stops cleanly, and a drafter it cannot
serve stops it at start-up with the reason."""

from __future__ import annotations

import json
import shutil
import sys

import pytest
import torch
from conftest import QUESTIONS, K

from oneiro_hf.serving.vllm_server import ServerFailed, VllmServer, concurrently

MAX_TOKENS = 48
CLIENTS = 6
CHATS = (*QUESTIONS, "Give three reasons why unit tests help a software team, one short paragraph each.")
COMPLETIONS = ("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
               "The three primary colors are")


def _serve(tmp_path, target_dir, draft=None, **kwargs) -> VllmServer:
    spec = None if draft is None else {"method": "eagle3", "model": str(draft), "num_speculative_tokens": K}
    return VllmServer(sys.executable, str(target_dir), tmp_path / "server.log", speculative_config=spec, **kwargs)


def _ask_all(server: VllmServer) -> list:
    """Every chat and completion request at once, from CLIENTS concurrent clients."""
    calls = [lambda q=q: server.chat([{"role": "user", "content": q}], MAX_TOKENS) for q in CHATS]
    calls += [lambda p=p: server.complete(p, MAX_TOKENS) for p in COMPLETIONS]
    return concurrently(calls, CLIENTS)


def _session(tmp_path, target_dir, draft=None) -> dict:
    server = _serve(tmp_path, target_dir, draft)
    with server:
        before = server.metrics()
        replies = _ask_all(server)
        after = server.metrics()
    return {"replies": replies, "before": before, "after": after, "status": server.process.returncode,
            "left_behind": server.left_behind}


@pytest.fixture(scope="module")
def plain_server(tmp_path_factory, target_dir):
    return _session(tmp_path_factory.mktemp("plain-server"), target_dir)


@pytest.fixture(scope="module")
def oneiro_server(tmp_path_factory, target_dir, exported):
    return _session(tmp_path_factory.mktemp("oneiro-server"), target_dir, exported)


@pytest.fixture(scope="module")
def hybrid_server(tmp_path_factory, target_dir, exported_hybrid):
    return _session(tmp_path_factory.mktemp("hybrid-server"), target_dir, exported_hybrid)


@pytest.mark.parametrize("speculative", ["oneiro_server", "hybrid_server"])
def test_concurrent_requests_get_the_plain_servers_greedy_texts(plain_server, speculative, request):
    plain, ours = plain_server["replies"], request.getfixturevalue(speculative)["replies"]
    assert len(ours) == len(CHATS) + len(COMPLETIONS)
    assert all(r.completion_tokens > 0 for r in plain)
    for asked, mine, theirs in zip(CHATS + COMPLETIONS, ours, plain):
        assert mine.text == theirs.text, asked
        assert mine.completion_tokens == theirs.completion_tokens, asked


def test_the_servers_metrics_count_the_drafters_accepted_drafts(oneiro_server, plain_server):
    gained = {key: oneiro_server["after"].get(key, 0) - oneiro_server["before"].get(key, 0)
              for key in ("drafts", "draft_tokens", "accepted", "generation_tokens")}
    print(f"server metrics gained: {gained}, per position {oneiro_server['after'].get('accepted_per_position')}")
    assert gained["generation_tokens"] == sum(r.completion_tokens for r in oneiro_server["replies"])
    assert gained["drafts"] > 0 and gained["draft_tokens"] == K * gained["drafts"]
    assert gained["accepted"] > 0
    assert sum(oneiro_server["after"]["accepted_per_position"]) == oneiro_server["after"]["accepted"]
    assert "drafts" not in plain_server["after"]  # a plain server reports no speculative counters


def test_the_servers_stop_cleanly(plain_server, oneiro_server, hybrid_server):
    for session in (plain_server, oneiro_server, hybrid_server):
        assert session["status"] == 0 and not session["left_behind"]


def _failed_start(tmp_path, target_dir, draft) -> str:
    server = _serve(tmp_path, target_dir, draft, start_timeout=600)
    with pytest.raises(ServerFailed) as failed:
        server.start()
    assert server.process.poll() is not None  # stopped, its engine process with it
    return str(failed.value)


def test_a_bad_drafter_folder_stops_the_server_at_start_up_with_the_reason(tmp_path, target_dir, exported):
    bad = tmp_path / "not-exported"
    shutil.copytree(exported, bad)
    config = json.loads((bad / "config.json").read_text())
    del config["oneiro_vllm"]  # a folder not written by oneiro-export vllm
    (bad / "config.json").write_text(json.dumps(config))
    log = _failed_start(tmp_path, target_dir, bad)
    assert "exited at start-up" in log
    assert "has no 'oneiro_vllm' section" in log and "Fix: write the folder with this oneiro-hf" in log


def test_a_drafter_for_another_target_stops_the_server_at_start_up_with_the_reason(tmp_path, target_dir):
    from transformers import LlamaConfig, LlamaForCausalLM

    from oneiro_hf import OneiroDrafter
    from oneiro_hf.serving.vllm_export import export_for_vllm

    config = LlamaConfig(vocab_size=49152, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         tie_word_embeddings=True)
    torch.manual_seed(0)
    other = LlamaForCausalLM(config).eval()
    other.save_pretrained(tmp_path / "other-target")
    OneiroDrafter.from_target(other, interval=(2, 4)).save_pretrained(tmp_path / "other-drafter")
    folder = export_for_vllm(tmp_path / "other-drafter", tmp_path / "other-vllm", str(tmp_path / "other-target"), K)
    log = _failed_start(tmp_path, target_dir, folder)
    assert "exported for another target" in log
    assert "hidden_size 576 (the drafter's target: 128)" in log and "Fix:" in log
