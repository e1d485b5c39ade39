"""Hub publishing and downloading, the model card, the drafter/target fit check and file errors.

Nothing here touches a network: downloads are read from a Hub cache laid out as huggingface_hub lays it
out (models--org--name/blobs, snapshots/<commit>/ symlinks, refs/<name>), and uploads go through an
httpx MockTransport installed with huggingface_hub's client-factory hook, which records every request so
the tests can assert the exact commit operations and file contents a publish sends.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest
import torch
from huggingface_hub import constants, scan_cache_dir, set_client_factory
from safetensors import safe_open
from tiny import make_model

from oneiro_hf import DrafterTargetMismatch, OneiroDrafter
from oneiro_hf.configuration_oneiro import FORMAT_VERSION
from oneiro_hf.storage.checkpoint import CorruptCheckpoint, DrafterNotFound, IncompatibleCheckpoint
from oneiro_hf.storage.hub import (
    ModelCardError,
    build_model_card,
    prepare_upload,
    publish_drafter,
    write_model_card,
)

ROOT = Path(__file__).resolve().parent.parent
REPO = "your-org/tiny-drafter"
BASE = "your-org/tiny-base"
ENDPOINT = "http://hub.test"  # reserved .test name: never resolvable, so nothing can leak out
COMMIT_OLD = "1" * 40
COMMIT_NEW = "2" * 40
NEW_COMMIT_OID = "c" * 40
# huggingface_hub's own once-a-day fetch while building its user agent (when it detects a coding agent in
# the environment); not part of any download or upload, so the fakes answer it and do not record it
AGENT_REGISTRY = "/api/agent-harnesses"


# ============================================================================================ helpers
def _drafter(seed: int = 0, name: str = BASE, vocab_ids=None, **settings):
    """A tiny drafter whose weights depend on `seed`, so two revisions are told apart by their weights."""
    model = make_model("llama", name=name)
    drafter = OneiroDrafter.from_target(model, draft_vocab_ids=vocab_ids, **settings)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in drafter.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    return model, drafter


def _git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _put_revision(cache: Path, repo_id: str, commit: str, folder: Path, refs: tuple[str, ...] = ()) -> Path:
    """Add `folder`'s files to the cache as huggingface_hub does: content-addressed blobs, relative symlinks.

    LFS files (the weights) are stored under their sha256, regular files under their git blob sha1.
    """
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    for file in sorted(folder.iterdir()):
        data = file.read_bytes()
        lfs = file.suffix == ".safetensors"
        blob_name = hashlib.sha256(data).hexdigest() if lfs else _git_blob_sha1(data)
        blob = repo / "blobs" / blob_name
        blob.write_bytes(data)
        (snapshot / file.name).symlink_to(Path("..") / ".." / "blobs" / blob_name)
    for ref in refs:
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / ref).write_text(commit)
    return snapshot


@pytest.fixture
def hub_cache(tmp_path):
    """A cache holding REPO at two revisions: v1 (old weights) and main (new weights, a later commit)."""
    cache = tmp_path / "hub"
    model, old = _drafter(seed=1)
    _, new = _drafter(seed=2)
    old.save_pretrained(tmp_path / "old")
    new.save_pretrained(tmp_path / "new")
    _put_revision(cache, REPO, COMMIT_OLD, tmp_path / "old", refs=("v1",))
    _put_revision(cache, REPO, COMMIT_NEW, tmp_path / "new", refs=("main",))
    return cache, model, old, new


class NoNetwork:
    """A huggingface_hub client whose every request fails (and is recorded for the test to see).

    It keeps huggingface_hub's request hook, the place where HF_HUB_OFFLINE=1 stops requests, as the
    default client has it.
    """

    def __init__(self) -> None:
        self.requests: list[str] = []

    def __call__(self) -> httpx2.Client:
        def handler(request: httpx2.Request) -> httpx2.Response:
            if request.url.path == AGENT_REGISTRY:
                return httpx2.Response(404)
            self.requests.append(f"{request.method} {request.url}")
            return httpx2.Response(599, text="the tests forbid network access")

        from huggingface_hub.utils._http import hf_request_event_hook

        return httpx2.Client(
            transport=httpx2.MockTransport(handler), event_hooks={"request": [hf_request_event_hook]}
        )


@pytest.fixture
def client_factory():
    """Install a client factory for huggingface_hub; the default one is restored afterwards."""
    from huggingface_hub.utils._http import default_client_factory

    installed = []

    def install(factory):
        installed.append(factory)
        set_client_factory(factory)
        return factory

    yield install
    set_client_factory(default_client_factory)


def _same_weights(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k].cpu(), sb[k].cpu()) for k in sa)


# ========================================================================================== download
def test_cache_fixture_is_a_valid_hub_cache(hub_cache):
    cache, *_ = hub_cache
    info = scan_cache_dir(cache)
    assert not info.warnings, info.warnings
    (repo,) = info.repos
    assert repo.repo_id == REPO
    assert {r.commit_hash for r in repo.revisions} == {COMMIT_OLD, COMMIT_NEW}
    assert {ref for r in repo.revisions for ref in r.refs} == {"main", "v1"}


def test_download_offline_with_local_files_only(hub_cache, client_factory):
    cache, model, old, new = hub_cache
    guard = client_factory(NoNetwork())
    latest = OneiroDrafter.from_pretrained(REPO, target=model, cache_dir=cache, local_files_only=True)
    assert _same_weights(latest, new) and not _same_weights(latest, old)
    assert latest.name_or_path == REPO and latest.config._commit_hash == COMMIT_NEW
    assert latest.target is model
    by_tag = OneiroDrafter.from_pretrained(REPO, target=model, cache_dir=cache, local_files_only=True, revision="v1")
    assert _same_weights(by_tag, old)
    by_commit = OneiroDrafter.from_pretrained(
        REPO, target=model, cache_dir=cache, local_files_only=True, revision=COMMIT_OLD
    )
    assert _same_weights(by_commit, old) and by_commit.config._commit_hash == COMMIT_OLD
    assert guard.requests == []


def test_download_with_hf_hub_offline(hub_cache, monkeypatch, client_factory):
    cache, model, old, new = hub_cache
    guard = client_factory(NoNetwork())
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    drafter = OneiroDrafter.from_pretrained(REPO, target=model, cache_dir=cache)
    assert _same_weights(drafter, new)
    assert _same_weights(OneiroDrafter.from_pretrained(REPO, target=model, cache_dir=cache, revision="v1"), old)
    # offline mode stops requests in huggingface_hub's own request hook, which NoNetwork does not install, so
    # an empty log means nothing was even attempted
    assert guard.requests == []


def test_download_with_hf_hub_offline_env_in_a_fresh_process(hub_cache, tmp_path):
    """HF_HUB_OFFLINE=1 and HF_HUB_CACHE set in the environment, read at import as in real use."""
    cache, model, _, new = hub_cache
    model.save_pretrained(tmp_path / "target")
    expected = tmp_path / "expected.safetensors"
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in new.state_dict().items()}, str(expected))
    script = (
        "import sys, torch\n"
        "from safetensors.torch import load_file\n"
        "from transformers import AutoModelForCausalLM\n"
        "from oneiro_hf import OneiroDrafter\n"
        "model = AutoModelForCausalLM.from_pretrained(sys.argv[1])\n"
        "model.name_or_path = sys.argv[3]\n"
        "d = OneiroDrafter.from_pretrained(sys.argv[2], target=model)\n"
        "ref = load_file(sys.argv[4])\n"
        "assert all(torch.equal(v, ref[k]) for k, v in d.state_dict().items()), 'weights differ'\n"
        "print('OK', d.name_or_path, d.config._commit_hash)\n"
    )
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_CACHE": str(cache),
        "HF_ENDPOINT": ENDPOINT,
        "OMP_NUM_THREADS": "1",
    }
    result = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "target"), REPO, BASE, str(expected)],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"OK {REPO} {COMMIT_NEW}" in result.stdout


def test_repo_not_in_cache_offline(tmp_path, client_factory):
    client_factory(NoNetwork())
    model = make_model("llama", name=BASE)
    with pytest.raises(DrafterNotFound) as info:
        OneiroDrafter.from_pretrained(REPO, target=model, cache_dir=tmp_path / "empty", local_files_only=True)
    message = str(info.value)
    assert "config.json" in message and REPO in message and "local_files_only" in message


def test_unknown_revision_offline(hub_cache, client_factory):
    cache, model, *_ = hub_cache
    client_factory(NoNetwork())
    with pytest.raises(DrafterNotFound, match="'v9'"):
        OneiroDrafter.from_pretrained(REPO, target=model, cache_dir=cache, local_files_only=True, revision="v9")


def test_interrupted_download_missing_weights(hub_cache, client_factory):
    """The cache has config.json but the weights' download never finished (only a .incomplete blob)."""
    cache, model, *_ = hub_cache
    client_factory(NoNetwork())
    repo = cache / "models--your-org--tiny-drafter"
    weights = repo / "snapshots" / COMMIT_NEW / "model.safetensors"
    blob = weights.resolve()
    weights.unlink()
    partial = blob.with_name(blob.name + ".incomplete")
    partial.write_bytes(blob.read_bytes()[:100])
    blob.unlink()
    with pytest.raises(CorruptCheckpoint) as info:
        OneiroDrafter.from_pretrained(REPO, target=model, cache_dir=cache, local_files_only=True)
    message = str(info.value)
    assert "model.safetensors" in message and "interrupted" in message
    assert "force_download=True" in message and str(repo) in message and partial.name in message
    # the other revision is complete and still loads
    OneiroDrafter.from_pretrained(REPO, target=model, cache_dir=cache, local_files_only=True, revision="v1")


@pytest.mark.parametrize("damage", ["truncate", "flip_a_byte"])
def test_damaged_weights_blob_in_the_cache(hub_cache, client_factory, damage):
    cache, model, *_ = hub_cache
    client_factory(NoNetwork())
    blob = (cache / "models--your-org--tiny-drafter" / "snapshots" / COMMIT_NEW / "model.safetensors").resolve()
    data = bytearray(blob.read_bytes())
    if damage == "truncate":
        data = data[: len(data) - 7]
    else:  # inside the last tensor's bytes: safetensors itself cannot notice this one
        data[-3] ^= 0xFF
    blob.write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpoint) as info:
        OneiroDrafter.from_pretrained(REPO, target=model, cache_dir=cache, local_files_only=True)
    message = str(info.value)
    assert "corrupt or truncated" in message and "model.safetensors" in message
    assert "force_download=True" in message and "models--your-org--tiny-drafter" in message


def test_newer_format_in_the_hub_cache(tmp_path, client_factory):
    client_factory(NoNetwork())
    model, drafter = _drafter()
    drafter.save_pretrained(tmp_path / "d")
    config = json.loads((tmp_path / "d" / "config.json").read_text())
    newer = FORMAT_VERSION + 1
    config.update(format_version=newer, oneiro_version=str(newer), oneiro_hf_version="9.0.0")
    (tmp_path / "d" / "config.json").write_text(json.dumps(config))
    _put_revision(tmp_path / "hub", REPO, COMMIT_NEW, tmp_path / "d", refs=("main",))
    with pytest.raises(IncompatibleCheckpoint) as info:
        OneiroDrafter.from_pretrained(REPO, target=model, cache_dir=tmp_path / "hub", local_files_only=True)
    message = str(info.value)
    assert "config.json" in message and f"format {newer}" in message and "9.0.0" in message
    assert "pip install --upgrade oneiro-hf" in message


def test_local_directories_keep_working_and_typos_are_named(tmp_path):
    model, drafter = _drafter()
    drafter.save_pretrained(tmp_path / "d")
    loaded = OneiroDrafter.from_pretrained(tmp_path / "d", target=model)
    assert _same_weights(loaded, drafter)
    with pytest.raises(DrafterNotFound, match="not a directory"):
        OneiroDrafter.from_pretrained(str(tmp_path / "no-such-dir"), target=model)
    with pytest.raises(DrafterNotFound, match="it is a file"):
        OneiroDrafter.from_pretrained(tmp_path / "d" / "config.json", target=model)


class DownloadHub:
    """Serves REPO's files at revisions like the Hub's resolve endpoint (HEAD for metadata, GET for bytes)."""

    def __init__(self, revisions: dict[str, tuple[str, Path]]) -> None:
        self.revisions = revisions  # name or commit -> (commit, folder of files)
        self.requests: list[tuple[str, str]] = []
        self.authorization: set[str | None] = set()

    def __call__(self) -> httpx2.Client:
        from huggingface_hub.utils._http import hf_request_event_hook

        return httpx2.Client(
            transport=httpx2.MockTransport(self.handle), event_hooks={"request": [hf_request_event_hook]}
        )

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        path = request.url.path
        if path == AGENT_REGISTRY:
            return httpx2.Response(404)
        self.requests.append((request.method, path))
        self.authorization.add(request.headers.get("authorization"))
        prefix = f"/{REPO}/resolve/"
        if not path.startswith(prefix):
            return httpx2.Response(404, headers={"X-Error-Code": "RepoNotFound"}, text="Repository not found")
        revision, filename = path[len(prefix):].split("/", 1)
        if revision not in self.revisions:
            return httpx2.Response(404, headers={"X-Error-Code": "RevisionNotFound"}, text="Invalid rev id")
        commit, folder = self.revisions[revision]
        file = folder / filename
        if not file.is_file():
            return httpx2.Response(
                404, headers={"X-Error-Code": "EntryNotFound", "X-Repo-Commit": commit}, text="Entry not found"
            )
        data = file.read_bytes()
        headers = {"X-Repo-Commit": commit, "ETag": f'"{_git_blob_sha1(data)}"', "Content-Length": str(len(data))}
        if file.suffix == ".safetensors":  # an LFS file: the Hub links it by its sha256
            headers.update({"X-Linked-Etag": f'"{hashlib.sha256(data).hexdigest()}"', "X-Linked-Size": str(len(data))})
        return httpx2.Response(200, headers=headers, content=b"" if request.method == "HEAD" else data)


@pytest.fixture
def download_hub(tmp_path, monkeypatch, client_factory):
    model, old = _drafter(seed=1)
    _, new = _drafter(seed=2)
    old.save_pretrained(tmp_path / "old")
    new.save_pretrained(tmp_path / "new")
    revisions = {
        "main": (COMMIT_NEW, tmp_path / "new"),
        COMMIT_NEW: (COMMIT_NEW, tmp_path / "new"),
        "v1": (COMMIT_OLD, tmp_path / "old"),
        COMMIT_OLD: (COMMIT_OLD, tmp_path / "old"),
    }
    hub = client_factory(DownloadHub(revisions))
    monkeypatch.setattr(constants, "ENDPOINT", ENDPOINT)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    return hub, model, old, new


def test_download_through_the_hub_then_offline_from_what_it_cached(download_hub, tmp_path):
    hub, model, old, new = download_hub
    cache = tmp_path / "cache"
    drafter = OneiroDrafter.from_pretrained(REPO, target=model, cache_dir=cache, token="hf_read_token")
    assert _same_weights(drafter, new) and drafter.config._commit_hash == COMMIT_NEW
    assert hub.authorization == {"Bearer hf_read_token"}
    fetched = {p.rsplit("/", 1)[1] for m, p in hub.requests if m == "GET"}
    assert fetched == {"config.json", "model.safetensors"}  # nothing else of the repo is downloaded
    tagged = OneiroDrafter.from_pretrained(REPO, target=model, cache_dir=cache, revision="v1")
    assert _same_weights(tagged, old)
    # the cache huggingface_hub wrote is what the offline tests build by hand: weights blob named by sha256
    weights = cache / "models--your-org--tiny-drafter" / "snapshots" / COMMIT_NEW / "model.safetensors"
    assert weights.is_symlink()
    assert weights.resolve().name == hashlib.sha256(weights.read_bytes()).hexdigest()
    assert (cache / "models--your-org--tiny-drafter" / "refs" / "v1").read_text() == COMMIT_OLD
    hub.requests.clear()
    offline = OneiroDrafter.from_pretrained(REPO, target=model, cache_dir=cache, local_files_only=True)
    assert _same_weights(offline, new) and hub.requests == []


def test_the_fix_in_the_corrupt_cache_message_works(download_hub, tmp_path):
    _, model, _, new = download_hub
    cache = tmp_path / "cache"
    OneiroDrafter.from_pretrained(REPO, target=model, cache_dir=cache)
    blob = (cache / "models--your-org--tiny-drafter" / "snapshots" / COMMIT_NEW / "model.safetensors").resolve()
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0xFF
    blob.write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpoint, match="force_download=True"):
        OneiroDrafter.from_pretrained(REPO, target=model, cache_dir=cache)
    repaired = OneiroDrafter.from_pretrained(REPO, target=model, cache_dir=cache, force_download=True)
    assert _same_weights(repaired, new)


def test_remote_errors_are_named(download_hub, tmp_path):
    _, model, *_ = download_hub
    with pytest.raises(DrafterNotFound, match="was not found"):
        OneiroDrafter.from_pretrained("your-org/missing", target=model, cache_dir=tmp_path / "c")
    with pytest.raises(DrafterNotFound, match="no revision 'v7'"):
        OneiroDrafter.from_pretrained(REPO, target=model, cache_dir=tmp_path / "c", revision="v7")


# ====================================================================================== format rule
def test_format_rule(tmp_path):
    model, drafter = _drafter()
    drafter.save_pretrained(tmp_path / "d")
    path = tmp_path / "d" / "config.json"
    config = json.loads(path.read_text())
    assert config["format_version"] == 1 and config["oneiro_version"] == "1"
    assert config["oneiro_hf_version"]
    # a 0.1.0 checkpoint (no format_version, no oneiro_hf_version) still loads
    legacy = {k: v for k, v in config.items() if k not in ("format_version", "oneiro_hf_version")}
    path.write_text(json.dumps(legacy))
    OneiroDrafter.from_pretrained(tmp_path / "d", target=model)
    # a newer format is refused even if only one of the two fields says so
    newer = FORMAT_VERSION + 1
    for fields in ({"format_version": newer}, {"oneiro_version": str(newer)}):
        path.write_text(json.dumps({**config, **fields}))
        with pytest.raises(IncompatibleCheckpoint, match=f"format {newer}"):
            OneiroDrafter.from_pretrained(tmp_path / "d", target=model)
    path.write_text(json.dumps({**config, "format_version": "two"}))
    with pytest.raises(CorruptCheckpoint, match="format_version"):
        OneiroDrafter.from_pretrained(tmp_path / "d", target=model)


# ========================================================================================= fit check
def test_mismatch_lists_field_drafter_value_target_value_and_fix(tmp_path):
    _, drafter = _drafter()
    target = make_model("llama", name="other-org/other-base", hidden=96, layers=6)
    with pytest.raises(DrafterTargetMismatch) as info:
        drafter.bind(target)
    found = {(d.field, d.drafter_value, d.target_value) for d in info.value.differences}
    assert found == {("hidden_size", 64, 96), ("num_hidden_layers", 4, 6)}  # names are never compared
    message = str(info.value)
    assert "hidden_size: drafter expects 64, target has 96" in message
    assert "num_hidden_layers: drafter expects 4, target has 6" in message
    assert "Fix:" in message and "from_target" in message


def test_mismatch_through_the_hub_cache(hub_cache, client_factory):
    cache, *_ = hub_cache
    client_factory(NoNetwork())
    wrong = make_model("qwen2", name=BASE, vocab=160)
    with pytest.raises(DrafterTargetMismatch) as info:
        OneiroDrafter.from_pretrained(REPO, target=wrong, cache_dir=cache, local_files_only=True)
    fields = {d.field for d in info.value.differences}
    assert fields == {"model_type", "vocab_size", "architecture"}
    assert REPO in str(info.value)  # names the drafter by its repo id, not its cache folder


# ============================================================================================== card
def _summary(target: str = BASE, relaxed: bool = False, violation: bool = False) -> dict:
    def block(speedup, tau):
        return {"tokens_per_s": 10.0 * speedup, "speedup_vs_greedy": speedup, "mean_accepted_tokens": tau}

    methods = {
        "greedy": {"lossless": True, "relaxed": False, "overall": block(1.0, None), "categories": {}},
        "oneiro-hybrid": {
            "lossless": True,
            "relaxed": False,
            "overall": block(1.5, 2.25),
            "categories": {"coding": block(1.75, 2.5), "math": block(1.25, 2.0)},
        },
    }
    if relaxed:
        methods["oneiro-topk-2"] = {
            "lossless": False,
            "relaxed": True,
            "overall": block(2.0, 3.0),
            "categories": {"coding": block(2.5, 3.5), "math": block(1.5, 2.5)},
        }
    return {
        "methods": methods,
        "lossless_violations": ["oneiro-hybrid"] if violation else [],
        "partial": False,
        "config": {"target": target, "device": "cpu", "dtype": "float32", "threads": 2, "max_new_tokens": 64},
    }


def test_card_metadata_usage_fit_and_measured_table():
    _, drafter = _drafter(vocab_ids=list(range(3, 67)))
    card = build_model_card(
        drafter, repo_id=REPO, license="apache-2.0", bench_summary=_summary(), hardware="2-core test VM"
    )
    data = card.data.to_dict()
    assert data["library_name"] == "oneiro-hf" and data["base_model"] == BASE
    assert data["license"] == "apache-2.0" and data["pipeline_tag"] == "text-generation"
    assert "speculative-decoding" in data["tags"] and "lossy-verification" not in data["tags"]
    text = card.content
    assert f'drafter = OneiroDrafter.from_pretrained("{REPO}", target=model)' in text
    assert "out = model.generate(**inputs, assistant_model=drafter)" in text
    assert "| hidden_size | 64 |" in text and "| num_hidden_layers | 4 |" in text
    assert "64 token ids (`draft_vocab_ids` in model.safetensors)" in text
    assert "| coding | 1.75× (tau 2.50) |" in text and "| **overall** | 1.50× (tau 2.25) |" in text
    assert "2-core test VM" in text and "device cpu" in text
    assert "lossy" not in text.split("## Measured speed")[1].split("## How")[0]


def test_card_shows_draft_share_and_acceptance_by_position():
    summary = _summary()
    summary["methods"]["oneiro-hybrid"]["overall"].update(
        draft_time_share=0.057, acceptance_by_position=[0.49, 0.31, 0.56, 0.52, 0.49, 0.51]
    )
    card = build_model_card(_drafter()[1], license="mit", bench_summary=summary)
    assert "| oneiro-hybrid | 5.7% | 49%, 31%, 56%, 52%, 49% |" in card.content
    summary["methods"]["oneiro-hybrid"]["overall"]["acceptance_by_position"] = [0.46, 0.22, None]
    short = build_model_card(_drafter()[1], license="mit", bench_summary=summary)
    assert "| oneiro-hybrid | 5.7% | 46%, 22%, — |" in short.content
    no_positions = build_model_card(_drafter()[1], license="mit", bench_summary=_summary())
    assert "acceptance by position" not in no_positions.content


def test_card_labels_relaxed_verification_lossy():
    _, drafter = _drafter()
    card = build_model_card(drafter, license="mit", bench_summary=_summary(relaxed=True))
    assert "lossy-verification" in card.data.tags
    assert "| category | oneiro-hybrid | oneiro-topk-2 *(lossy)* |" in card.content
    assert "relaxed verification (oneiro-topk-2)" in card.content
    # a drafter whose default verification is relaxed says so at the top
    _, relaxed = _drafter(verification="topk")
    card = build_model_card(relaxed, license="mit")
    assert "lossy-verification" in card.data.tags
    assert "**Lossy by default.**" in card.content and 'verification="topk"' in card.content
    assert "topk (lossy)" in card.content
    # a lossless method that differed from greedy in the measured run is not passed off as lossless
    card = build_model_card(drafter, license="mit", bench_summary=_summary(violation=True))
    assert "oneiro-hybrid *(differs from greedy)*" in card.content and "Lossless violation" in card.content


def test_card_and_bench_report_classify_methods_alike():
    from oneiro_hf.bench.report import is_relaxed
    from oneiro_hf.storage.cards import ModelCardError, _method_is_lossy

    names = ["greedy", "oneiro-hybrid", "oneiro-tree", "oneiro-topk-2", "oneiro-threshold-0.1@refined",
             "oneiro-latent-fixed-3", "hf-lookup"]
    for name in names:  # the summary's flag is the report's classification, and the card reads only the flag
        assert _method_is_lossy(name, {"relaxed": is_relaxed(name)}) is is_relaxed(name), name
    assert _method_is_lossy("some-new-method", {"relaxed": True})
    with pytest.raises(ModelCardError, match="no 'relaxed' flag"):
        _method_is_lossy("oneiro-topk-2", {})


def test_card_training_provenance():
    _, drafter = _drafter(vocab_ids=list(range(3, 67)))
    info = {
        "base_model": BASE,
        "interval": [2, 4],
        "draft_vocab_size": 64,
        "data_files": ["runs/data/selfdistill.jsonl"],
        "sources": {"synthetic": 12, "stdlib": 30},
        "records": 42,
        "learning_rate": 0.0003,
        "hardware": "cpu, 2 threads",
        "evals": [{"label": "final", "eval_tau": 1.5}],
    }
    text = build_model_card(drafter, license="mit", training_info=info).content
    assert "- data files: runs/data/selfdistill.jsonl" in text
    assert "- prompt sources (records): stdlib 30, synthetic 12" in text
    assert "- learning rate: 0.0003" in text and "| final | 1.500 |" in text
    bad = {**info, "interval": [1, 3]}
    with pytest.raises(ModelCardError, match=r"interval: training info says \[1, 3\], drafter has \[2, 4\]"):
        build_model_card(drafter, license="mit", training_info=bad)
    text = build_model_card(drafter, license="mit").content
    assert "published without training metadata" in text


def test_card_checks_it_describes_the_target_the_drafter_fits():
    _, drafter = _drafter()
    with pytest.raises(DrafterTargetMismatch) as info:
        build_model_card(drafter, license="mit", base_model="someone-else/other-model")
    assert {(d.field, d.drafter_value, d.target_value) for d in info.value.differences} >= {
        ("base_model", BASE, "someone-else/other-model")
    }
    # the bound target is checked too: bind to a look-alike, then swap in a target of another size
    target = make_model("llama", name=BASE, hidden=96)
    object.__setattr__(drafter._bound, "model", target)
    with pytest.raises(DrafterTargetMismatch, match="hidden_size: drafter expects 64, target has 96"):
        build_model_card(drafter, license="mit")
    with pytest.raises(ModelCardError, match="measured on target 'other-org/other'"):
        build_model_card(_drafter()[1], license="mit", bench_summary=_summary(target="other-org/other"))


def test_card_needs_a_hub_base_model_and_a_license():
    _, drafter = _drafter(name="/data/checkpoints/my-base")
    with pytest.raises(ModelCardError, match="base_model='org/name'"):
        build_model_card(drafter, license="mit")
    card = build_model_card(drafter, license="mit", base_model="your-org/my-base")
    assert card.data.base_model == "your-org/my-base"
    with pytest.raises(ModelCardError, match="license"):
        build_model_card(drafter, base_model="your-org/my-base")
    with pytest.raises(ModelCardError, match="not a Hub repo id"):
        build_model_card(drafter, license="mit", base_model="my-base")


def test_write_model_card_and_template_from_model_cards_folder(tmp_path):
    _, drafter = _drafter()
    path = write_model_card(drafter, tmp_path, license="mit", repo_id=REPO)
    assert path == tmp_path / "README.md"
    text = path.read_text()
    assert text.startswith("---\n") and "base_model: your-org/tiny-base" in text
    template = ROOT / "oneiro_hf" / "model_cards" / "drafter_card.md"
    assert "{{ card_data }}" in template.read_text()
    custom = tmp_path / "mine.md"
    custom.write_text("---\n{{ card_data }}\n---\n\nCustom card for {{ base_model }}\n")
    out = write_model_card(drafter, tmp_path / "custom.md", license="mit", template_path=custom)
    assert out.read_text().rstrip().endswith("Custom card for your-org/tiny-base")


def test_prepare_upload_writes_exactly_the_published_files(tmp_path):
    _, drafter = _drafter(vocab_ids=list(range(5, 45)))
    files = prepare_upload(drafter, tmp_path / "up", repo_id=REPO, license="mit", dtype="bfloat16")
    names = [f.name for f in files]
    assert names == ["README.md", "config.json", "model.safetensors"], names
    with safe_open(str(tmp_path / "up" / "model.safetensors"), "pt") as handle:
        keys = set(handle.keys())
        assert torch.equal(handle.get_tensor("draft_vocab_ids"), torch.arange(5, 45))
        assert handle.get_tensor("fuse.weight").dtype == torch.bfloat16
    assert all(k.startswith(("layers.", "fuse.")) or k == "draft_vocab_ids" for k in keys), keys
    assert json.loads((tmp_path / "up" / "config.json").read_text())["dtype"] == "bfloat16"
    with pytest.raises(FileExistsError, match="not empty"):
        prepare_upload(drafter, tmp_path / "up", license="mit")
    # a drafter trained from a local copy is published as the Hub model's drafter, and loads with it
    _, local = _drafter(name="/data/checkpoints/tiny-base")
    prepare_upload(local, tmp_path / "local", license="mit", base_model=BASE)
    config = json.loads((tmp_path / "local" / "config.json").read_text())
    assert config["base_model_name_or_path"] == BASE
    assert local.config.base_model_name_or_path == "/data/checkpoints/tiny-base"  # the live drafter is untouched
    hub_model = make_model("llama", name=BASE)
    assert OneiroDrafter.from_pretrained(tmp_path / "local", target=hub_model).target is hub_model
    # a failed card check writes nothing
    with pytest.raises(ModelCardError):
        prepare_upload(drafter, tmp_path / "nothing", license=None)
    assert not (tmp_path / "nothing").exists()


# ============================================================================================ upload
class FakeHub:
    """Answers the requests huggingface_hub sends for create_repo + create_commit, and records them."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []
        self.headers: list[dict] = []
        self.preupload: list[dict] = []
        self.lfs_batch: list[dict] = []
        self.lfs_uploads: dict[str, bytes] = {}
        self.commits: list[list[dict]] = []
        self.create_payloads: list[dict] = []

    def __call__(self) -> httpx2.Client:
        return httpx2.Client(transport=httpx2.MockTransport(self.handle), follow_redirects=True)

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        path = request.url.path
        if path == AGENT_REGISTRY:
            return httpx2.Response(404)
        self.requests.append((request.method, path))
        self.headers.append(dict(request.headers))
        body = request.read()
        if request.method == "POST" and path == "/api/repos/create":
            self.create_payloads.append(json.loads(body))
            return httpx2.Response(200, json={"url": f"{ENDPOINT}/{REPO}", "name": REPO})
        if request.method == "POST" and path == "/api/validate-yaml":
            return httpx2.Response(200, json={"errors": [], "warnings": []})
        if request.method == "POST" and path == f"/api/models/{REPO}/preupload/main":
            payload = json.loads(body)
            self.preupload.append(payload)
            files = [
                {
                    "path": f["path"],
                    "uploadMode": "lfs" if f["path"].endswith(".safetensors") else "regular",
                    "shouldIgnore": False,
                }
                for f in payload["files"]
            ]
            return httpx2.Response(200, json={"files": files})
        if request.method == "POST" and path == f"/{REPO}.git/info/lfs/objects/batch":
            payload = json.loads(body)
            self.lfs_batch.append(payload)
            objects = [
                {
                    "oid": o["oid"],
                    "size": o["size"],
                    "actions": {"upload": {"href": f"{ENDPOINT}/lfs-upload/{o['oid']}"}},
                }
                for o in payload["objects"]
            ]
            return httpx2.Response(200, json={"transfer": "basic", "objects": objects})
        if request.method == "PUT" and path.startswith("/lfs-upload/"):
            self.lfs_uploads[path.rsplit("/", 1)[1]] = body
            return httpx2.Response(200)
        if request.method == "POST" and path == f"/api/models/{REPO}/commit/main":
            self.commits.append([json.loads(line) for line in body.splitlines() if line.strip()])
            return httpx2.Response(
                200,
                json={"commitUrl": f"{ENDPOINT}/{REPO}/commit/{NEW_COMMIT_OID}", "commitOid": NEW_COMMIT_OID,
                      "pullRequestUrl": None},
            )
        return httpx2.Response(500, json={"error": f"FakeHub does not expect {request.method} {path}"})


@pytest.fixture
def fake_hub(monkeypatch, client_factory):
    hub = client_factory(FakeHub())
    monkeypatch.setattr(constants, "ENDPOINT", ENDPOINT)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)  # plain LFS, so the bytes cross this boundary
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    return hub


def _expected_folder(drafter, tmp_path, **card) -> dict[str, bytes]:
    files = prepare_upload(drafter, tmp_path / "expected", repo_id=REPO, **card)
    return {f.name: f.read_bytes() for f in files}


def test_publish_writes_the_weights_in_the_dtype_training_saved_them_in(tmp_path):
    """A drafter bound to a float32 target holds float32 copies; its publish writes what training saved (bf16)."""
    _, drafter = _drafter(vocab_ids=list(range(3, 67)))
    assert drafter.fuse.weight.dtype == torch.float32
    info = {"base_model": BASE, "interval": [2, 4], "draft_vocab_size": 64, "save_dtype": "bfloat16"}
    prepare_upload(drafter, tmp_path / "saved", license="mit", training_info=info)
    with safe_open(str(tmp_path / "saved" / "model.safetensors"), "pt") as handle:
        assert handle.get_tensor("fuse.weight").dtype == torch.bfloat16
    assert json.loads((tmp_path / "saved" / "config.json").read_text())["dtype"] == "bfloat16"
    card = (tmp_path / "saved" / "README.md").read_text()
    assert "bfloat16" in card.split("## Use")[0] and "float32" not in card.split("## Use")[0]
    # an explicit dtype wins; no training info keeps the dtype in memory
    prepare_upload(drafter, tmp_path / "fp16", license="mit", training_info=info, dtype="float16")
    with safe_open(str(tmp_path / "fp16" / "model.safetensors"), "pt") as handle:
        assert handle.get_tensor("fuse.weight").dtype == torch.float16
    prepare_upload(drafter, tmp_path / "memory", license="mit")
    with safe_open(str(tmp_path / "memory" / "model.safetensors"), "pt") as handle:
        assert handle.get_tensor("fuse.weight").dtype == torch.float32
    with pytest.raises(ValueError, match="floating point dtype such as 'bfloat16', got 'int8'"):
        prepare_upload(drafter, tmp_path / "bad", license="mit", dtype="int8")


def test_publish_sends_exactly_these_files_in_one_commit(fake_hub, tmp_path):
    _, drafter = _drafter(vocab_ids=list(range(7, 71)))
    card = {"license": "apache-2.0", "bench_summary": _summary(), "hardware": "test VM"}
    expected = _expected_folder(drafter, tmp_path, **card)
    info = publish_drafter(drafter, REPO, token="hf_test_token", commit_message="Publish tiny drafter", **card)
    assert info.oid == NEW_COMMIT_OID
    assert fake_hub.requests == [
        ("POST", "/api/repos/create"),
        ("POST", "/api/validate-yaml"),
        ("POST", f"/api/models/{REPO}/preupload/main"),
        ("POST", f"/{REPO}.git/info/lfs/objects/batch"),
        ("PUT", f"/lfs-upload/{hashlib.sha256(expected['model.safetensors']).hexdigest()}"),
        ("POST", f"/api/models/{REPO}/commit/main"),
    ]
    assert all(h.get("authorization") == "Bearer hf_test_token" for h, (_, p) in zip(fake_hub.headers,
               fake_hub.requests) if not p.startswith("/lfs-upload/"))
    assert fake_hub.create_payloads == [{"name": "tiny-drafter", "organization": "your-org", "type": "model"}]
    assert sorted(f["path"] for f in fake_hub.preupload[0]["files"]) == sorted(expected)
    (commit,) = fake_hub.commits
    header, *operations = commit
    assert header == {"key": "header", "value": {"summary": "Publish tiny drafter", "description": ""}}
    sent: dict[str, bytes] = {}
    for op in operations:
        value = op["value"]
        if op["key"] == "file":
            assert value["encoding"] == "base64"
            sent[value["path"]] = base64.b64decode(value["content"])
        else:
            assert op["key"] == "lfsFile" and value["algo"] == "sha256", op
            data = fake_hub.lfs_uploads[value["oid"]]
            assert hashlib.sha256(data).hexdigest() == value["oid"] and len(data) == value["size"]
            sent[value["path"]] = data
    assert [op["key"] for op in operations].count("lfsFile") == 1
    assert sent.keys() == expected.keys() == {"README.md", "config.json", "model.safetensors"}
    for name, data in expected.items():
        assert sent[name] == data, name
    # what was sent is a loadable drafter with the draft vocabulary, and only drafter weights
    upload = tmp_path / "sent"
    upload.mkdir()
    for name, data in sent.items():
        (upload / name).write_bytes(data)
    with safe_open(str(upload / "model.safetensors"), "pt") as handle:
        assert torch.equal(handle.get_tensor("draft_vocab_ids"), torch.arange(7, 71))
        names = list(handle.keys())  # safe_open is not a mapping
        assert not [k for k in names if "embed" in k or "lm_head" in k or k.startswith("norm")]
    model = make_model("llama", name=BASE)
    assert _same_weights(OneiroDrafter.from_pretrained(upload, target=model), drafter)
    readme = sent["README.md"].decode()
    assert "base_model: your-org/tiny-base" in readme and "| coding | 1.75× (tau 2.50) |" in readme


def test_push_to_hub_method_publishes_the_same_way_with_training_summary(fake_hub, tmp_path):
    _, drafter = _drafter()
    info = {"base_model": BASE, "interval": [2, 4], "records": 3}
    drafter.push_to_hub(REPO, license="mit", training_info=info, private=True)
    assert fake_hub.create_payloads[0]["visibility"] == "private"
    (commit,) = fake_hub.commits
    paths = sorted(op["value"]["path"] for op in commit[1:])
    assert paths == ["README.md", "config.json", "model.safetensors", "training_summary.json"]
    summary = next(op for op in commit[1:] if op["value"]["path"] == "training_summary.json")
    assert json.loads(base64.b64decode(summary["value"]["content"])) == info


def test_publish_refuses_before_any_request_when_the_card_is_wrong(fake_hub):
    _, drafter = _drafter()
    with pytest.raises(ModelCardError, match="license"):
        publish_drafter(drafter, REPO)
    with pytest.raises(DrafterTargetMismatch):
        publish_drafter(drafter, REPO, license="mit", base_model="someone-else/other-model")
    with pytest.raises(ValueError, match="org/name"):
        publish_drafter(drafter, "no-namespace", license="mit")
    assert fake_hub.requests == []


# ============================================================================================ example
def test_publish_example_dry_run(tmp_path):
    out = tmp_path / "would-upload"
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "publish.py"), "--tiny", "--dry-run", str(out),
         "--repo-id", REPO, "--license", "mit"],
        check=False,
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": ENDPOINT, "OMP_NUM_THREADS": "1"},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    readme = (out / "README.md").read_text()
    assert f'OneiroDrafter.from_pretrained("{REPO}", target=model)' in readme
    assert "dry run" in result.stdout.lower()
    shutil.rmtree(out)


def test_publish_example_writes_a_target_relative_checkpoint(tmp_path):
    def run(*flags):
        return subprocess.run(
            [sys.executable, str(ROOT / "examples" / "publish.py"), "--tiny", "--repo-id", REPO, "--license", "mit",
             *flags],
            check=False, capture_output=True, text=True, timeout=300,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": ENDPOINT, "OMP_NUM_THREADS": "1"},
        )

    result = run("--layer-rank", "2", "--token-rank", "4", "--dry-run", str(tmp_path / "rel"))
    assert result.returncode == 0, result.stderr[-3000:]
    config = json.loads((tmp_path / "rel" / "config.json").read_text())
    assert config["weights_storage"] == {"kind": "target_relative", "layer_rank": 2, "token_rank": 4}
    assert config["format_version"] == 2
    readme = (tmp_path / "rel" / "README.md").read_text()
    assert "rank-2 difference from the target's" in readme
    assert re.search(r"parameters once rebuilt, [\d.]+ MiB in \w+; stored as [\d.]+ MiB of low-rank differences", readme)
    refused = run("--token-rank", "4", "--dry-run", str(tmp_path / "bad"))
    assert refused.returncode == 2 and "--token-rank needs --layer-rank" in refused.stderr
