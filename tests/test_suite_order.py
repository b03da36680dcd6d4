"""The suite's file order table (tests/support/file_seconds.json, read by tests/conftest.py)
is rebuilt from a JUnit report, and names only files that exist."""

import json
from pathlib import Path

from support.file_seconds import TABLE, seconds_per_file

TESTS = Path(__file__).parent


def test_seconds_per_file_sums_a_file_s_cases_longest_first(tmp_path):
    report = tmp_path / "run.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.a.test_x" name="t1" time="2.4"/>'
        '<testcase classname="tests.a.test_x" name="t2" time="3.3"/>'
        '<testcase classname="tests.test_y" name="t" time="9.0"/>'
        '<testcase classname="tests.test_z" name="t" time="0.01"/>'
        '</testsuite></testsuites>')
    table = seconds_per_file(str(report))
    assert table == {"tests/test_y.py": 9, "tests/a/test_x.py": 6, "tests/test_z.py": 1}
    assert list(table) == ["tests/test_y.py", "tests/a/test_x.py", "tests/test_z.py"]


def test_the_table_names_files_that_exist():
    table = json.loads(TABLE.read_text())
    missing = [path for path in table if not (TESTS.parent / path).is_file()]
    assert not missing, f"{missing}: rebuild with tests/support/file_seconds.py"
