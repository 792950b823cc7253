import pytest

from krakenlm.fileio import write_csv_atomically, write_text_atomically


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
