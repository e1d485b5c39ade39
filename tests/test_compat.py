"""The transformers range: too old or known-broken releases are refused, untested newer ones warn once."""

from __future__ import annotations

import warnings

import pytest
import torch
from packaging.version import Version

from oneiro_hf import UnsupportedTransformersVersion, check_transformers_version, compat


@pytest.mark.parametrize("version", ["4.57.6", "5.0.0", "5.8.0", "5.17.0"])
def test_too_old_transformers_is_refused_with_the_fix(version):
    with pytest.raises(UnsupportedTransformersVersion, match=version.replace(".", r"\.")) as info:
        check_transformers_version(version)
    assert f"pip install 'transformers>={compat.MIN_TRANSFORMERS}'" in str(info.value)


@pytest.mark.parametrize("version", [str(compat.MIN_TRANSFORMERS), "5.24.0", "5.25.0", "5.25.3", "5.25.1.dev0", "5.25.0rc1"])
def test_tested_releases_pass_silently(version):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_transformers_version(version)


@pytest.mark.parametrize("version", ["5.26.0", "5.30.2", "6.0.0.dev0"])
def test_newer_untested_release_warns_once(version, monkeypatch):
    monkeypatch.setattr(compat, "_warned", set())
    with pytest.warns(compat.UntestedTransformersVersion, match=version.replace(".", r"\.")) as record:
        check_transformers_version(version)
    assert "pip install 'transformers<5.26.0'" in str(record[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_transformers_version(version)  # said once


def test_a_known_break_is_refused_naming_it(monkeypatch):
    monkeypatch.setattr(compat, "KNOWN_BREAKS", (("==5.26.*", "the assisted loop no longer asks for a generator"),))
    with pytest.raises(UnsupportedTransformersVersion, match="no longer asks") as info:
        check_transformers_version("5.26.1")
    assert "pip install" in str(info.value)
    check_transformers_version("5.24.0")


def test_installed_transformers_is_accepted():
    check_transformers_version()


def test_declared_requirement_matches_the_tested_minimum():
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    pyproject = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())
    (requirement,) = [d for d in pyproject["project"]["dependencies"] if d.startswith("transformers")]
    name, _, lowest = requirement.partition(">=")
    assert name == "transformers" and Version(lowest) == compat.MIN_TRANSFORMERS  # and no upper pin


def test_the_oldest_lane_installs_the_oldest_supported_release():
    import re
    from pathlib import Path

    makefile = (Path(__file__).resolve().parent.parent / "Makefile").read_text()
    (pinned,) = re.findall(r"^OLDEST_TRANSFORMERS \?= (\S+)$", makefile, flags=re.MULTILINE)
    assert pinned == str(compat.MIN_TRANSFORMERS)


def test_layers_get_the_cache_by_the_keyword_their_forward_takes():
    class New:
        def forward(self, hidden_states, cache=None):
            return hidden_states

    class Old:
        def forward(self, hidden_states, past_key_values=None):
            return hidden_states

    class Neither:
        def forward(self, hidden_states):
            return hidden_states

    assert compat.cache_keyword(New) == "cache" and compat.cache_keyword(Old) == "past_key_values"
    with pytest.raises(UnsupportedTransformersVersion, match="Neither.forward"):
        compat.cache_keyword(Neither)


def test_tree_verification_needs_the_release_its_loop_was_tested_on():
    with pytest.raises(UnsupportedTransformersVersion, match=r"config sets tree\) needs transformers >=5.24.0") as info:
        compat.check_tree_supported("5.18.0")
    assert "pass oneiro_tree=False" in str(info.value)
    compat.check_tree_supported("5.24.0")


def test_a_hidden_states_selection_means_the_full_tuples_indices_on_every_release():
    """5.24 returns the full tuple's entries for a list; 5.18 reads a list as decoder-layer indices. Below 5.24 a
    selection is asked as every state, and on the installed release the returned entries are the full tuple's."""
    assert compat.hidden_states_selection([2, 3], "5.18.0") is True
    assert compat.hidden_states_selection([2, 3], "5.24.0") == [2, 3]
    from tiny import make_model, random_prompt

    model = make_model("llama")
    ids = random_prompt(7, seed=1)
    with torch.no_grad():
        full = model(ids, output_hidden_states=True).hidden_states
        picked = model(ids, output_hidden_states=compat.hidden_states_selection([1, 2])).hidden_states
    for i in (1, 2):
        torch.testing.assert_close(picked[i], full[i])
