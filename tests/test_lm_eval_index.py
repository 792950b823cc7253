"""The on-disk cache of lm-eval's built-in task index (evaluation/lm_eval_index.py), on a small
directory of task YAMLs standing in for lm-eval's own."""

from pathlib import Path

import pytest

pytest.importorskip("lm_eval")
from lm_eval.tasks import _index

from krakenlm.evaluation import lm_eval_index
from krakenlm.evaluation.lm_eval_index import cached_build, use_cached_builtin_index

ORIGINAL = _index.TaskIndex.build


def write_task(directory: Path, name: str, tag: str = "") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.yaml"
    path.write_text(f"task: {name}\ndataset_path: json\noutput_type: multiple_choice\n"
                    + (f"tag: {tag}\n" if tag else ""))
    return path


def summary(index: dict) -> dict:
    return {name: (entry.kind, entry.yaml_path, sorted(entry.tags))
            for name, entry in index.items()}


@pytest.fixture
def roots(tmp_path):
    builtin, include = tmp_path / "builtin", tmp_path / "include"
    write_task(builtin, "alpha", tag="letters")
    write_task(builtin / "sub", "beta", tag="letters")
    write_task(include, "beta")  # overrides the built-in beta, as an --include_path does
    write_task(include, "gamma")
    return builtin, include


class Counting:
    """lm-eval's own build, counting which roots it was asked to index."""
    def __init__(self):
        self.roots: list[Path] = []

    def __call__(self, paths, *, resolve_includes=True):
        paths = list(paths)
        self.roots += paths
        return ORIGINAL(paths, resolve_includes=resolve_includes)


def test_the_second_build_reads_the_cache_and_equals_lm_evals_own(roots, tmp_path):
    builtin, include = roots
    counting = Counting()
    build = cached_build(counting, builtin, "9.9", tmp_path / "cache")
    expected = summary(ORIGINAL([builtin, include]))
    assert set(expected) == {"alpha", "beta", "gamma", "letters"}
    assert expected["beta"][1] == include / "beta.yaml"

    first = summary(build([builtin, include]))
    second = summary(build([builtin, include]))

    assert first == second == expected
    assert counting.roots.count(builtin) == 1  # indexed once, then read from the cache
    assert counting.roots.count(include) == 2  # included directories: every time, as lm-eval
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [
        f"v1-lm-eval-9.9-{lm_eval_index.yaml_fingerprint(builtin)}.pickle"]


def test_an_edited_task_file_is_indexed_afresh_and_the_stale_cache_goes(roots, tmp_path):
    builtin, _ = roots
    build = cached_build(ORIGINAL, builtin, "9.9", tmp_path / "cache")
    assert "delta" not in build([builtin])
    (builtin / "alpha.yaml").write_text("task: delta\ndataset_path: json\n")

    assert set(build([builtin])) == {"beta", "delta", "letters"}
    assert len(list((tmp_path / "cache").iterdir())) == 1


def test_another_lm_eval_version_has_its_own_cache(roots, tmp_path):
    builtin, _ = roots
    for version in ("0.4.12", "0.4.13"):
        cached_build(ORIGINAL, builtin, version, tmp_path / "cache")([builtin])
    assert sorted(p.name.split("-")[3] for p in (tmp_path / "cache").iterdir()) == [
        "0.4.12", "0.4.13"]


def test_a_torn_cache_file_is_rebuilt(roots, tmp_path):
    builtin, include = roots
    cache = lm_eval_index.cache_file(builtin, "9.9", tmp_path / "cache")
    cache.parent.mkdir()
    cache.write_bytes(b"\x80\x05not a pickle")
    build = cached_build(ORIGINAL, builtin, "9.9", tmp_path / "cache")

    assert summary(build([builtin, include])) == summary(ORIGINAL([builtin, include]))
    assert summary(build([builtin, include])) == summary(ORIGINAL([builtin, include]))


def test_an_unwritable_cache_leaves_the_index_as_lm_eval_builds_it(roots, tmp_path):
    builtin, include = roots
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache directory would go")
    build = cached_build(ORIGINAL, builtin, "9.9", blocker)

    assert summary(build([builtin, include])) == summary(ORIGINAL([builtin, include]))


def test_other_directories_are_left_to_lm_eval(roots, tmp_path):
    builtin, include = roots
    counting = Counting()
    build = cached_build(counting, builtin, "9.9", tmp_path / "cache")

    assert summary(build([include])) == summary(ORIGINAL([include]))
    assert summary(build([include, builtin])) == summary(ORIGINAL([include, builtin]))
    assert counting.roots == [include, include, builtin]
    assert not (tmp_path / "cache").exists()


def test_lm_evals_build_is_wrapped_once(monkeypatch):
    # restored after the test (pytest keeps the staticmethod object of a class attribute)
    monkeypatch.setattr(_index.TaskIndex, "build", _index.TaskIndex.__dict__["build"])
    assert use_cached_builtin_index() and use_cached_builtin_index()
    wrapped = _index.TaskIndex.__dict__["build"]
    assert isinstance(wrapped, staticmethod)
    assert wrapped.__func__._krakenlm_cached_index
    assert wrapped.__func__.__closure__ is not None
    assert not getattr(ORIGINAL, "_krakenlm_cached_index", False)
