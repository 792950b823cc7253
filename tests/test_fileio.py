import os

import pytest

from krakenlm.fileio import acquire_lock, lock_holder, write_csv_atomically, write_text_atomically


def test_a_failed_check_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "profile.yaml"
    target.write_text("old: 1\n")

    def reject(tmp):
        raise ValueError("does not parse")

    with pytest.raises(ValueError):
        write_text_atomically(target, "new: [", check=reject)
    assert target.read_text() == "old: 1\n"
    assert [p.name for p in tmp_path.iterdir()] == ["profile.yaml"]


def test_csv_is_written_whole(tmp_path):
    target = write_csv_atomically(tmp_path / "rows.csv", ["a", "b"], [{"a": 1, "b": "x,y"}])
    assert target.read_text() == 'a,b\n1,"x,y"\n'


def test_the_oserror_behind_a_librarys_own_exception_is_found():
    import errno

    from safetensors import SafetensorError

    from krakenlm.fileio import os_error_from

    # the message safetensors' writer gives on a full tmpfs (see test_checkpoint_crash.py)
    found = os_error_from(SafetensorError("Error while serializing: I/O error: No space left on "
                                          "device (os error 28)"), "/out/model.safetensors")
    assert (found.errno, found.strerror, found.filename) == (
        errno.ENOSPC, "No space left on device", "/out/model.safetensors")
    try:
        try:
            raise OSError(errno.EIO, "Input/output error")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704")
    except RuntimeError as wrapped:
        assert os_error_from(wrapped).errno == errno.EIO
    assert os_error_from(ValueError("a bug, not the disk")) is None


def test_lock_holder_names_a_live_holder_and_changes_nothing(tmp_path):
    path = tmp_path / "run" / ".lock"
    assert lock_holder(path) is None and not path.parent.exists()  # no lock file: created nothing
    with acquire_lock(path) as held:
        record = path.read_text()
        assert lock_holder(path)["pid"] == os.getpid()
        assert path.read_text() == record
    stale = '{"pid": 1, "host": "elsewhere"}\n'  # what a killed writer leaves behind
    path.write_text(stale)
    assert lock_holder(path) is None and path.read_text() == stale
    with acquire_lock(path) as again:  # the probe left the lock free
        assert again.previous == {"pid": 1, "host": "elsewhere"}
    assert held.previous == {}


def test_an_atomic_write_has_the_permissions_a_plain_write_would(tmp_path):
    """mkstemp's 0600 (and mkdtemp's 0700) must not reach the result: a new file gets what
    open() gives under the umask, a replaced one keeps its own mode."""
    import os
    import stat

    from krakenlm.fileio import write_bytes_atomically, write_text_atomically
    from krakenlm.interop.atomic_dir import write_directory_atomically

    old = os.umask(0o022)
    try:
        new = write_text_atomically(tmp_path / "new.json", "{}\n")
        assert stat.S_IMODE(new.stat().st_mode) == 0o644
        binary = write_bytes_atomically(tmp_path / "plot.png", b"\x89PNG")
        assert stat.S_IMODE(binary.stat().st_mode) == 0o644
        private = tmp_path / "private.txt"
        private.write_text("a")
        private.chmod(0o600)
        write_text_atomically(private, "b")
        assert stat.S_IMODE(private.stat().st_mode) == 0o600 and private.read_text() == "b"
        out = write_directory_atomically(tmp_path / "export", lambda d: (d / "x").write_text("1"),
                                         force=False, what="export")
        assert stat.S_IMODE(out.stat().st_mode) == 0o755
        os.umask(0o077)
        assert stat.S_IMODE(write_text_atomically(tmp_path / "other", "").stat().st_mode) == 0o600
    finally:
        os.umask(old)
