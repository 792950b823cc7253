"""Fuzz every parser with Hypothesis: any input gives a result or a one-line error.

Each target of tests/fuzz_parsers.py (hardware YAML, software profiles, calibration files,
config.json, design spaces, explore tables, corpora, checkpoints; some through
`krakenlm.cli.main`) is fed damaged copies of real files. The number of examples comes from the
Hypothesis profile (tests/conftest.py): `ci` in `make test`, `HYPOTHESIS_PROFILE=long` on
demand (docs/fuzzing.md), scaled per target by its cost. A failure prints the smallest input
Hypothesis found; the fix goes into the parser, and this test stays as its regression.
"""

from __future__ import annotations

import sys

import pytest
from hypothesis import Phase, given, settings

from fuzz_parsers import REGRESSIONS, TARGETS, TRACE_TARGETS, Regression, Target

from krakenlm.errors import KrakenError


def examples_for(target: Target) -> int:
    """The profile's max_examples scaled down for targets that are slow per example."""
    return max(5, round(settings().max_examples / target.cost))


def run_target(target: Target) -> None:
    """Run `target`'s property under the loaded profile (Hypothesis raises on a failure)."""
    budget = settings(settings(), max_examples=examples_for(target))
    if target.known_failure:  # expected to fail: report the first failure, do not shrink it
        budget = settings(budget, phases=(Phase.explicit, Phase.generate))
    # One function per target: Hypothesis keys its example database on the test function.
    def property_holds(data) -> None:
        target.check(data)
    property_holds.__qualname__ = property_holds.__name__ = f"fuzz_{target.id.replace('-', '_')}"
    given(target.strategy())(budget(property_holds))()


def _param(target: Target):
    marks = [pytest.mark.xfail(reason=target.known_failure, strict=False)] \
        if target.known_failure else []
    return pytest.param(target, id=target.id, marks=marks)


@pytest.mark.parametrize("target", [_param(t) for t in TARGETS])
def test_parser_gives_a_result_or_one_line_error(target: Target):
    run_target(target)


@pytest.mark.parametrize("case", REGRESSIONS, ids=lambda c: f"{c.target}: {c.name}")
def test_what_fuzzing_found_is_a_one_line_error(case: Regression):
    """Each input once gave a traceback (or a multi-line message); now one line saying what."""
    target = next(t for t in TARGETS if t.id == case.target)
    out = target.check(case.make())
    if target.id.endswith("-cli"):  # stderr of `krakenlm ...`, exit 2 checked by the target
        assert out.startswith("error: ") and case.expect in out, out
    else:
        assert isinstance(out, KrakenError), out
        assert case.expect in str(out)


@pytest.mark.skipif(not TRACE_TARGETS, reason="no serving-trace reader yet: add its Target to "
                    "TRACE_TARGETS in tests/fuzz_parsers.py when the serving simulator lands")
@pytest.mark.parametrize("target", [_param(t) for t in TRACE_TARGETS] or [None])
def test_serving_trace_reader_gives_a_result_or_one_line_error(target: Target):
    run_target(target)


def test_the_property_catches_a_traceback_and_a_multi_line_error(monkeypatch):
    """The checks can fail: a non-KrakenError escapes, and a multi-line message or a CLI
    failure that is not one `error:` line is a violation."""
    from fuzz_parsers import PropertyViolation, cli_one_line_or_success, one_line_or_result

    from krakenlm import cli

    class RawMessage(KrakenError):
        """A subclass that undoes KrakenError's escaping of line breaks."""

        def __str__(self) -> str:
            return Exception.__str__(self)

    def fails(error: KrakenError):
        def call():
            raise error
        return call

    with pytest.raises(ValueError):
        one_line_or_result(lambda: int("not a number"))
    with pytest.raises(PropertyViolation, match="not one line"):
        one_line_or_result(fails(RawMessage("first line\nsecond line")))
    with pytest.raises(PropertyViolation, match="not one line"):
        one_line_or_result(fails(RawMessage("")))
    assert isinstance(one_line_or_result(fails(KrakenError("one line"))), KrakenError)
    assert cli_one_line_or_success(["models"]) == ""

    def noisy_command(*args, **kwargs):
        print("some progress", file=sys.stderr)
        raise KrakenError("the error")
    monkeypatch.setattr(cli, "app", noisy_command)
    with pytest.raises(PropertyViolation, match="exit 2"):
        cli_one_line_or_success(["models"])


def test_a_kraken_error_message_is_one_line_whatever_it_quotes():
    """A message quoting a field name or value that holds a line break shows it escaped."""
    message = str(KrakenError("field 'a\nb' in x\ry\x1ez\u2028"))
    assert message == "field 'a\\nb' in x\\ry\\x1ez\\u2028"
    assert len(message.splitlines()) == 1


@pytest.mark.parametrize("name, damage", [("meta.json", b"{not json"), ("meta.json", b"[1]"),
                                          ("train.bin", None), ("val.bin", b"\x01")])
def test_a_damaged_prepared_corpus_is_prepared_again_with_a_warning(tmp_path, capsys, name,
                                                                    damage):
    """Found by fuzzing: a damaged meta.json was a JSONDecodeError or AttributeError, a split of
    an odd size a ValueError from np.memmap, a missing one a FileNotFoundError."""
    from fuzz_parsers import corpus_seed

    from krakenlm.data.prepare import prepare_corpus

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for file_name, data in corpus_seed().items():
        (corpus / file_name).write_bytes(data)
    first = prepare_corpus(str(corpus), cache_dir=tmp_path / "cache", progress=False)
    good = {s: first.split(s).tolist() for s in ("train", "val")}
    target = first.directory / name
    target.unlink()
    if damage is not None:
        target.write_bytes(damage)
    capsys.readouterr()
    again = prepare_corpus(str(corpus), cache_dir=tmp_path / "cache", progress=False)
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"warning: the prepared corpus {first.directory} is damaged (")
    assert err.endswith("preparing it again") and "\n" not in err
    assert {s: again.split(s).tolist() for s in ("train", "val")} == good


def test_resume_drops_metrics_rows_that_are_not_objects_with_a_step(tmp_path):
    """Found by fuzzing: a row that was a list, or had no step, was a TypeError/KeyError on
    `train --resume`; a byte that is not UTF-8 a UnicodeDecodeError. Such rows are dropped like
    the line a kill tears."""
    from krakenlm.training.trainer import MetricsLog

    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 1, "loss": 9.0}\n[1, 2]\n{"loss": 8.0}\n{"step": "2"}\n'
                     b'{"step": 2, "loss": 7.5, "note": "\xff"}\n{"step": 3, "loss": 7.0}\n')
    MetricsLog(path, resume_step=2, enabled=True)
    assert path.read_text().splitlines() == ['{"step": 1, "loss": 9.0}',
                                             '{"step": 2, "loss": 7.5, "note": "\ufffd"}']
