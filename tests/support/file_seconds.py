"""Rewrite file_seconds.json (tests/conftest.py hands the longest files out first) from a
suite run's JUnit report: `pytest ... --junitxml=run.xml`, then

    python tests/support/file_seconds.py run.xml
"""

import collections
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

TABLE = Path(__file__).with_name("file_seconds.json")


def seconds_per_file(junit_xml: str) -> dict:
    """{test file: seconds its tests took (setup, call and teardown)}, whole seconds, at
    least 1, longest first."""
    totals = collections.Counter()
    for case in ET.parse(junit_xml).iter("testcase"):
        path = case.get("file") or case.get("classname").replace(".", "/") + ".py"
        totals[path] += float(case.get("time") or 0)
    return {path: max(1, round(seconds)) for path, seconds in totals.most_common()}


if __name__ == "__main__":
    TABLE.write_text(json.dumps(seconds_per_file(sys.argv[1]), indent=1) + "\n")
