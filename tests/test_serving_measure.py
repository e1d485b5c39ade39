"""The measurements the vLLM lane and benchmark share (oneiro_hf.serving.measure, vllm_server), checked without vLLM."""

from __future__ import annotations

import json
import sys

import pytest
from tiny import greedy, make_model, random_prompt

from oneiro_hf import OneiroDrafter
from oneiro_hf.serving.measure import counter_difference, fixed_k_acceptance


def test_counter_difference_per_counter_and_per_position() -> None:
    before = {"drafts": 3, "accepted": 5, "accepted_per_position": [3, 2, 0]}
    after = {"drafts": 7, "accepted": 9, "accepted_per_position": [6, 4, 1], "draft_tokens": 12}
    assert counter_difference(after, before) == {"drafts": 4, "accepted": 4, "accepted_per_position": [3, 2, 1],
                                                 "draft_tokens": 12}


def test_fixed_k_acceptance_counts_every_accepted_draft_token_by_position() -> None:
    model = make_model("llama", strength="prefix")
    drafter = OneiroDrafter.from_target(model)
    prompts = [random_prompt(12, seed).tolist()[0] for seed in (1, 2)]
    out = fixed_k_acceptance(model, drafter, prompts, k=3, max_new_tokens=16)
    assert out["tokens"] == [greedy(model, random_prompt(12, seed), 16)[0, 12:].tolist() for seed in (1, 2)]
    assert out["accepted"] == sum(out["accepted_per_position"]) == sum(out["accepted_per_prompt"]) > 0
    positions = out["accepted_per_position"]
    assert len(positions) == 3 and positions[0] >= positions[1] >= positions[2]  # a draft's j-th needs its j-1 first
    assert out["rounds"] >= positions[0] and drafter.record_draft_rounds is False


METRICS = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 63.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 189.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 57.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 31.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 10.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 16.0
vllm:spec_decode_num_accepted_tokens_created{engine="0",model_name="m"} 1.7e9
vllm:generation_tokens_total{engine="0",model_name="m"} 120.0
vllm:generation_tokens_total{engine="1",model_name="m"} 5.0
"""


def test_the_servers_metrics_are_read_by_counter_and_position() -> None:
    from oneiro_hf.serving.vllm_server import parse_metrics

    assert parse_metrics(METRICS) == {"drafts": 63, "draft_tokens": 189, "accepted": 57, "generation_tokens": 125,
                                      "accepted_per_position": [31, 16, 10]}
    assert parse_metrics("# nothing speculative\nvllm:prompt_tokens_total 7.0\n") == {"prompt_tokens": 7}


def test_a_failed_start_names_the_root_cause_first() -> None:
    from oneiro_hf.serving.vllm_server import error_lines

    log = ("(APIServer pid=1) WARNING [x.py:1] Found ulimit ... errors like `OSError: [Errno 24] Too many`\n"
           "(Worker pid=3) ERROR [m.py:9] ValueError: the draft folder's config.json has no 'oneiro_vllm' section. "
           "Fix: export it.\n"
           "(EngineCore pid=2) ERROR [m.py:9] ValueError: the draft folder's config.json has no 'oneiro_vllm' "
           "section. Fix: export it.\n"
           "RuntimeError: Engine core initialization failed. See root cause above.\n")
    assert error_lines(log) == [
        "ValueError: the draft folder's config.json has no 'oneiro_vllm' section. Fix: export it.",
        "RuntimeError: Engine core initialization failed. See root cause above."]


def test_the_server_command_is_loopback_only_and_carries_the_draft_model(tmp_path) -> None:
    from oneiro_hf.serving.vllm_server import SERVER_MODULE, server_command

    spec = {"method": "eagle3", "model": "/d", "num_speculative_tokens": 3}
    command = server_command("py", "/t", 8001, spec)
    assert command[:3] == ["py", "-m", SERVER_MODULE] and "--enforce-eager" in command
    assert command[command.index("--host") + 1] == "127.0.0.1" and command[command.index("--port") + 1] == "8001"
    assert json.loads(command[command.index("--speculative-config") + 1]) == spec
    assert "--speculative-config" not in server_command("py", "/t", 8001)


def test_a_server_that_exits_at_start_up_is_reported_with_its_log(tmp_path) -> None:
    from oneiro_hf.serving.vllm_server import ServerFailed, VllmServer

    # this interpreter has no vLLM (the main lane never installs it): `python -m vllm...` exits at once
    server = VllmServer(sys.executable, "/no/target", tmp_path / "server.log", start_timeout=120)
    with pytest.raises(ServerFailed, match=r"exited at start-up \(status 1\)") as failed:
        server.start()
    assert "vllm" in str(failed.value) and server.process.poll() is not None and not server.left_behind
