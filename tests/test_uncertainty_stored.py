"""The residual bands stored beside the residual table (uncertainty.BANDS_FILE), which a query
reads instead of working them out from the table."""

from krakenlm.simulator.uncertainty import (
    Bands,
    Case,
    read_residuals,
    residuals_path,
    shipped_bands,
    stored_bands,
    write_shipped_bands,
)


def test_the_stored_bands_are_the_shipped_tables_exactly():
    # None here means the table was installed without its bands: run
    # `python benchmarks/sim_loso.py --install-residuals` (or uncertainty.write_shipped_bands())
    stored = stored_bands(residuals_path().read_bytes())
    assert stored is not None, "model_residual_bands.json was not written from this table"
    worked_out = Bands.from_residuals(read_residuals())
    assert stored.groups and stored == worked_out  # every field, floats compared exactly
    assert shipped_bands() == worked_out


def test_bands_written_for_a_table_read_back_only_for_that_table(tmp_path):
    lines = residuals_path().read_text(encoding="utf-8").splitlines(keepends=True)
    table = tmp_path / "residuals.csv"
    table.write_text(lines[0] + "".join(lines[1::3]), encoding="utf-8")  # another table
    out = write_shipped_bands(table, tmp_path / "bands.json")
    worked_out = Bands.from_residuals(read_residuals(table))
    stored = stored_bands(table.read_bytes(), out)
    assert stored == worked_out and stored.groups != shipped_bands().groups
    for case in (Case("A100", 8, 1, 1024, "decode"), Case("H100", 4, 64, 9000, "prefill"),
                 Case("MI300X", 8, 8, 512, "e2e")):
        assert stored.band(case) == worked_out.band(case)
    assert stored_bands(table.read_bytes() + lines[2].encode(), out) is None  # a changed table
    assert stored_bands(table.read_bytes(), tmp_path / "none.json") is None
