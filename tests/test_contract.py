"""The Python copy of the seam (keyed_watermarks/_contract.py) equals the JVM's
(io.github.keyedwatermarks.contract.Contract): class names, report columns and kinds, metric
groups, the state record read_key_state decodes, the Spark lines, the idle_clock choices,
adaptive-lateness defaults."""

from __future__ import annotations

import json

import pytest

import keyed_watermarks as kw
from keyed_watermarks import _contract

# The fast layer: ./dev/test --quick runs the tests marked quick (pytest.ini).
pytestmark = pytest.mark.quick


@pytest.mark.all_versions
def test_python_contract_equals_the_jvm_contract(spark):
    jvm_contract = json.loads(spark.sparkContext._jvm.io.github.keyedwatermarks.contract.Contract.json())
    assert _contract.as_dict() == jvm_contract


def test_adaptive_lateness_defaults_come_from_the_contract():
    a = kw.AdaptiveLateness()
    assert (a.quantile, a.min, a.max, a.relative_error) == (
        _contract.ADAPTIVE_QUANTILE,
        _contract.ADAPTIVE_MIN,
        _contract.ADAPTIVE_MAX,
        _contract.ADAPTIVE_RELATIVE_ERROR,
    )


def test_keyed_watermark_has_one_public_constructor(spark):
    events = spark.createDataFrame([], "device STRING, ts TIMESTAMP")
    with pytest.raises(TypeError, match=r"kw\.keyed_watermark"):
        kw.KeyedWatermark(events, "device", "ts", "5 seconds")
