"""Adds up the test counts of dev/test's runs (pytest's JUnit XML and the Scala tests' sbt log,
per Spark line) and prints them per run and as one closing line: 'total: N passed, N failed'."""

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

reports = Path(sys.argv[1])
passed = failed = skipped = 0
for xml in sorted(reports.glob("spark-*.xml")):
    suite = ET.parse(xml).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    n, f, e, s = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
    print(f"   pytest on Spark {xml.stem[len('spark-'):]}: {n - f - e - s} passed, {f + e} failed, {s} skipped")
    passed, failed, skipped = passed + n - f - e - s, failed + f + e, skipped + s
for log in sorted(reports.glob("sbt-*.log")):
    line = log.stem[len("sbt-"):]
    where = "every Spark line (one sbt launch)" if line == "all" else f"Spark {line}"
    # One summary per test command: sbt-all.log has one per line.
    m = re.findall(r"Tests: succeeded (\d+), failed (\d+), canceled (\d+), ignored (\d+)", log.read_text())
    if m:
        ok, bad, canceled, ignored = (sum(int(t[i]) for t in m) for i in range(4))
        print(f"   Scala tests on {where}: {ok} passed, {bad} failed")
        passed, failed, skipped = passed + ok, failed + bad, skipped + canceled + ignored
    else:
        print(f"   Scala tests on {where}: no summary in the sbt log (compilation or start-up failed)")
        failed += 1
print(f"total: {passed} passed, {failed} failed, {skipped} skipped")
