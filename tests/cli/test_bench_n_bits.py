"""The MatMulNBits bench's choice of cases by words (qops/cli/bench_n_bits.py)."""

import pytest

from qops.cli import bench_n_bits


def test_words_pick_whole_words_alternatives_in_one_place_all_places_together():
    every = bench_n_bits.cases()
    names = [case.name for case in every]
    assert len(every) == 48
    one_row = bench_n_bits.select(every, ["m1"])
    # "m1" is a word of its own: not the start of "m128".
    assert len(one_row) == 24 and all(case.rows == 1 for case in one_row)
    picked = bench_n_bits.select(every, ["m1", "level4"])
    assert [case.name for case in picked] == [
        name for name in names if name.split()[3] == "m1" and name.endswith("level4")]
    shapes = bench_n_bits.select(every, ["4096x4096", "4096x11008", "m128", "zp"])
    assert len(shapes) == 8 and {(c.k, c.n) for c in shapes} == {(4096, 4096), (4096, 11008)}
    assert all(c.rows == 128 and c.zero_points for c in shapes)
    assert bench_n_bits.select(every, []) == every


def test_a_word_no_case_has_names_the_words_there_are():
    with pytest.raises(SystemExit, match="no case has the word.*m7.*the words are.*level4"):
        bench_n_bits.select(bench_n_bits.cases(), ["m1", "m7"])
