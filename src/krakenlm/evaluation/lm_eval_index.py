"""lm-eval's index of its own task YAMLs, kept on disk between runs.

Every `lm_eval.tasks.TaskManager` builds a `{name: Entry}` index by parsing each of the ~14,000
YAML files under `lm_eval/tasks/` (`lm_eval.tasks._index.TaskIndex.build`, lm-eval 0.4.10 and
later): 10-60 s on a CPU machine before anything is evaluated, in every `krakenlm lm-eval` and
`krakenlm-lm-eval` run that names a hub task, a group or a misspelt task. Those files change
only when lm-eval does, so the index of that one directory is pickled under
`$KRAKENLM_CACHE/lm-eval-index/` the first time and read back (about 1 s) afterwards.

The cache is keyed by lm-eval's version and a fingerprint of the YAML files (each file's path,
size and modification time), so an upgraded or edited lm-eval is indexed afresh. Directories a
user includes (`--include_path`) are indexed every time, as lm-eval does, and override built-in
entries of the same name as they would in lm-eval. A cache that cannot be read is rebuilt; one
that cannot be written is skipped: the index is then built as lm-eval builds it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
from collections.abc import Callable, Iterable
from pathlib import Path

from ..data.prepare import cache_root
from ..fileio import write_bytes_atomically

log = logging.getLogger(__name__)

CACHE_FORMAT = 1  # bump when what is pickled changes
_MARK = "_krakenlm_cached_index"


def yaml_fingerprint(root: Path) -> str:
    """A digest of every YAML file under `root`: relative path, size, modification time."""
    digest = hashlib.sha256()
    for directory, subdirs, files in os.walk(root):
        subdirs.sort()
        for name in sorted(files):
            if name.endswith(".yaml"):
                stat = os.stat(os.path.join(directory, name))
                rel = os.path.relpath(os.path.join(directory, name), root)
                digest.update(f"{rel}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:20]


def cache_file(root: Path, version: str, cache_dir: Path | None = None) -> Path:
    """Where the index of `root` (lm-eval `version`) is cached."""
    directory = cache_dir if cache_dir is not None else cache_root() / "lm-eval-index"
    return directory / f"v{CACHE_FORMAT}-lm-eval-{version}-{yaml_fingerprint(root)}.pickle"


def cached_build(original: Callable, builtin_root: Path, version: str,
                 cache_dir: Path | None = None) -> Callable:
    """`TaskIndex.build` with the index of `builtin_root` read from the cache when it is first."""
    builtin_root = Path(builtin_root).resolve()

    def build(paths: Iterable, *, resolve_includes: bool = True) -> dict:
        paths = [Path(p) for p in paths]
        if not resolve_includes or not paths or paths[0].resolve() != builtin_root:
            return original(paths, resolve_includes=resolve_includes)
        index = builtin_index(original, builtin_root, version, cache_dir)
        if len(paths) > 1:
            for name, entry in original(paths[1:], resolve_includes=True).items():
                if name in index:  # lm-eval's own merge rule: later paths win, with a warning
                    log.warning("Task '%s' from %s overrides existing task from %s", name,
                                entry.yaml_path, index[name].yaml_path)
                index[name] = entry
        return index

    setattr(build, _MARK, True)
    return build


def builtin_index(original: Callable, root: Path, version: str,
                  cache_dir: Path | None = None) -> dict:
    """The index of `root`: from the cache if it holds this version and these files, else built
    by `original` and cached."""
    try:
        path = cache_file(root, version, cache_dir)
    except Exception as exc:  # noqa: BLE001  (e.g. an empty $KRAKENLM_CACHE: index without it)
        log.debug("lm-eval index cache unavailable (%s)", exc)
        return original([root], resolve_includes=True)
    if path.is_file():
        try:
            with path.open("rb") as fh:
                index = pickle.load(fh)
            if isinstance(index, dict):
                return index
        except Exception as exc:  # noqa: BLE001  (a torn or foreign file: rebuild it)
            log.debug("rebuilding the lm-eval index cache %s (%s)", path, exc)
    index = original([root], resolve_includes=True)
    try:
        write_bytes_atomically(path, pickle.dumps(index, protocol=pickle.HIGHEST_PROTOCOL))
        for stale in path.parent.glob(f"v{CACHE_FORMAT}-lm-eval-{version}-*.pickle"):
            if stale != path:  # this version's files as they were before an edit
                stale.unlink(missing_ok=True)
    except (OSError, pickle.PicklingError, TypeError, AttributeError) as exc:
        log.debug("lm-eval index not cached (%s)", exc)
    return index


def use_cached_builtin_index() -> bool:
    """Make lm-eval's `TaskIndex.build` read its built-in tasks from the cache (idempotent).
    False, and nothing changed, when this lm-eval has no such index (before 0.4.10)."""
    try:
        import lm_eval
        import lm_eval.tasks
        from lm_eval.tasks import _index
    except ImportError:
        return False
    task_index = getattr(_index, "TaskIndex", None)
    original = getattr(task_index, "build", None)
    if original is None:
        return False
    if getattr(original, _MARK, False):
        return True
    version = getattr(lm_eval, "__version__", "unknown")
    task_index.build = staticmethod(
        cached_build(original, Path(lm_eval.tasks.__file__).parent, version))
    return True

