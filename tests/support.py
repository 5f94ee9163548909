"""Helpers shared by the test modules (import them from here, never from another test module):
time units and the event-time base, micro-batch replay through Spark's file source, running a
query to the end and reading its executed plan, the generated multi-key streams of the
reference-model tests, and hypothesis settings for tests whose every example is a Spark query.

Fixtures (the session-wide `spark`, `workdir`) stay in conftest.py; the pure-Python models of
docs/semantics.md are modules of their own (reference_model.py, policy_model.py).
"""

from __future__ import annotations

import datetime
import json
import os
import random
import shutil
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

SECOND = 1_000_000  # event times are microseconds since the epoch
# 2024-01-01T00:00:00Z: a whole day, so windows of any size used by the tests align to it.
BASE = 1_704_067_200 * SECOND
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
# The JIT's first tier only (C1), for the Spark processes a test starts itself.
FIRST_JIT_TIER_ONLY = "-XX:TieredStopAtLevel=1"
EVENT_SCHEMA = "device STRING, ts TIMESTAMP, temp DOUBLE"


def short_lived_jvm_env(env: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """``env`` (default: this process's environment) with ``JAVA_TOOL_OPTIONS`` that keep every
    JVM started under it at the JIT's first tier: for the Spark processes a test starts itself
    (an older line's queries, a pipeline killed and restarted, a Connect server, local-cluster's
    executors). They live seconds to a few minutes, too short for C2's faster code to pay for
    compiling it on a 2-core machine; the pytest workers' own sessions live for the whole suite
    and keep both tiers. Measured in CONTRIBUTING.md, "CI time"."""
    env = dict(os.environ if env is None else env)
    env["JAVA_TOOL_OPTIONS"] = " ".join(o for o in (env.get("JAVA_TOOL_OPTIONS"), FIRST_JIT_TIER_ONLY) if o)
    return env


def ts(micros: Optional[int]) -> Optional[datetime.datetime]:
    """An aware datetime for `micros` since the epoch (exact, whatever the local time zone)."""
    return None if micros is None else EPOCH + datetime.timedelta(microseconds=micros)


def to_spark_rows(batches: Sequence[Sequence[tuple]]) -> List[List[tuple]]:
    """(key, micros|None, value) rows as rows of EVENT_SCHEMA."""
    return [[(k, ts(t), v) for k, t, v in b] for b in batches]


# --------------------------------------------------------------------------------------
# Running queries
# --------------------------------------------------------------------------------------


class Replay:
    """Writes micro-batches as parquet files for the file source, one file per batch; with
    `empty_batches` an empty batch is an empty file (a micro-batch without rows, so that two
    sources' batches line up), else it is skipped."""

    def __init__(self, spark: SparkSession, root: Path, schema: str = EVENT_SCHEMA,
                 empty_batches: bool = False) -> None:
        self.spark = spark
        self.empty_batches = empty_batches
        self.root = Path(root)
        self.schema = schema
        self.input_dir = self.root / "input"
        self.input_dir.mkdir(parents=True, exist_ok=True)
        self.batches = 0

    def add(self, rows: Sequence[tuple]) -> None:
        """Adds one micro-batch (empty rows: skipped, no file and no batch, unless `empty_batches`)."""
        if not rows and not self.empty_batches:
            return
        i = self.batches
        tmp = self.root / f"tmp-{i}"
        self.spark.createDataFrame(list(rows), self.schema).coalesce(1).write.parquet(str(tmp))
        (part,) = [p for p in tmp.iterdir() if p.name.endswith(".parquet")]
        target = self.input_dir / f"batch-{i:05d}.parquet"
        shutil.move(str(part), target)
        shutil.rmtree(tmp)
        # The file source orders files by modification time.
        os.utime(target, (1_000_000 + i, 1_000_000 + i))
        self.batches += 1

    def add_all(self, batches: Iterable[Sequence[tuple]]) -> None:
        for b in batches:
            self.add(b)

    def stream(self) -> DataFrame:
        return (
            self.spark.readStream.schema(self.schema)
            .option("maxFilesPerTrigger", 1)
            .parquet(str(self.input_dir))
        )


def start_to_end(writer, checkpoint: Path):
    """Starts `writer` (a DataStreamWriter) with Trigger.AvailableNow and `checkpoint`, waits
    until all input is processed and returns the finished query (for its progress reports);
    raises the query's exception."""
    query = writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    query.awaitTermination()
    exc = query.exception()
    if exc is not None:
        raise exc
    return query


def run_to_end(df: DataFrame, out_dir: Path, checkpoint: Path):
    """Runs `df` with Trigger.AvailableNow into a parquet sink until all input is processed;
    returns the finished query (for its progress reports); raises the query's exception."""
    return start_to_end(df.writeStream.format("parquet").outputMode("append").option("path", str(out_dir)), checkpoint)


def run_available(df: DataFrame, out_dir: Path, checkpoint: Path) -> List[Row]:
    """Runs `df` with Trigger.AvailableNow into a parquet sink; returns all rows written so far."""
    run_to_end(df, out_dir, checkpoint)
    return read_output(df.sparkSession, out_dir, df.schema)


def read_output(spark: SparkSession, out_dir: Path, schema) -> List[Row]:
    if not Path(out_dir).exists():
        return []
    return spark.read.schema(schema).parquet(str(out_dir)).collect()


def executed_plan(query) -> str:
    """The physical plan of the query's last micro-batch, as text (classic sessions only): how
    the keyed operator and its partial aggregation were planned (e.g. 'partials=on-heap')."""
    return query._jsq.streamingQuery().lastExecution().executedPlan().toString()


# --------------------------------------------------------------------------------------
# Checks shared by the model tests
# --------------------------------------------------------------------------------------


def assert_late_per_key(rows, model_late: Dict[Tuple[int, str], int]) -> Dict[str, int]:
    """Per-key late counts of the report's 'late' rows equal the model's (batch, key) counts."""
    late: Dict[str, int] = Counter()
    for r in rows:
        if r.kw_kind == "late":
            late[r.device] += r.kw_late_rows
    want: Dict[str, int] = Counter()
    for (_, key), n in model_late.items():
        want[key] += n
    assert dict(late) == dict(want)
    return dict(late)


def per_row_gap(value) -> Optional[int]:
    """The per-row gap of the dynamic-gap session tests (micros): None or <= 0 is invalid.
    The queries compute it from `temp` with the same thresholds (see the session tests)."""
    if value is None:
        return None
    return 10 * SECOND if value > 20 else 3 * SECOND if value >= 0 else 0


# --------------------------------------------------------------------------------------
# Generated streams (hypothesis) and fixed ones
# --------------------------------------------------------------------------------------

# Lateness and window sizes (seconds) the generated reference-model tests draw from.
LATENESS_CHOICES_S = [0, 2, 5, 10]
WINDOW_CHOICES_S = [5, 10]
BASES_S = [0, 1_700_000_000]  # base 0 with backward steps also yields negative event times
# A key's clock mostly moves forward (0..9 s per row) and sometimes jumps back up to 25 s.
STEP_S = st.sampled_from(list(range(0, 10)) * 5 + list(range(-25, 0)))


@st.composite
def sub_stream(draw, prefix: str, base: int) -> List[List[tuple]]:
    """One stream of a few keys, as micro-batches of (key, micros|None, temp|None) rows.

    Each key's event time is a random walk (mostly forward, sometimes backward far enough to
    be late), with occasional sub-second offsets to hit window boundaries from both sides.
    `base` (micros) is where the walks start.
    """
    n_keys = draw(st.integers(1, 3))
    clock = [base + draw(st.integers(0, 20)) * SECOND for _ in range(n_keys)]
    events = draw(st.lists(
        st.tuples(
            st.integers(0, n_keys - 1),
            STEP_S,
            st.sampled_from([0, 0, 0, 0, 1, -1, SECOND // 2]),  # extra micros
            st.sampled_from(["ok"] * 12 + ["null_key", "null_time"]),
            st.one_of(st.none(), st.integers(-20, 40)),
        ),
        min_size=8, max_size=30))
    rows = []
    for key, step, micros, kind, temp in events:
        clock[key] += step * SECOND
        t = clock[key] + micros
        value = None if temp is None else float(temp)
        if kind == "null_key":
            rows.append((None, t, value))
        elif kind == "null_time":
            rows.append((f"{prefix}{key}", None, value))
        else:
            rows.append((f"{prefix}{key}", t, value))
    # Random split into 1..6 contiguous micro-batches.
    cuts = sorted(set(draw(st.lists(st.integers(1, len(rows) - 1), min_size=1, max_size=5))))
    cuts = [c for c in cuts if 0 < c < len(rows)]
    bounds = [0] + cuts + [len(rows)]
    return [rows[a:b] for a, b in zip(bounds, bounds[1:])]


@st.composite
def packed_streams(draw):
    """Several streams (disjoint key prefixes) merged batch by batch. They start from one base,
    so that only a skew bound (Spark's global watermark) makes keys of one stream interact
    with another's; without one, they never do."""
    base = draw(st.sampled_from(BASES_S)) * SECOND
    subs = [draw(sub_stream(f"s{i}_", base)) for i in range(draw(st.integers(2, 3)))]
    merged = [sum((s[i] for s in subs if i < len(s)), []) for i in range(max(map(len, subs)))]
    return [b for b in merged if b]  # an empty micro-batch is no micro-batch


# Rows of the watermark-policy tests: (key, micros, temp, lateness micros | None, source).
POLICY_SCHEMA = "device STRING, ts TIMESTAMP, temp DOUBLE, lat STRING, src STRING"


@st.composite
def policy_stream(draw, max_rows: int = 30, per_key_lateness: bool = False):
    """Micro-batches of (key, micros, temp, lateness micros | None, source) rows: 1-4 keys whose
    clocks mostly move forward and sometimes jump back; each key's lateness is fixed per key
    (None: the default), or with `per_key_lateness` drawn per row."""
    n_keys = draw(st.integers(1, 4))
    clock = [BASE + draw(st.integers(0, 30)) * SECOND for _ in range(n_keys)]
    table = [draw(st.sampled_from([None, 0, 3, 8, 20])) for _ in range(n_keys)]
    events = draw(st.lists(st.tuples(
        st.integers(0, n_keys - 1),
        st.sampled_from(list(range(0, 9)) * 4 + list(range(-25, 0))),
        st.integers(-5, 30),
        st.sampled_from(["a", "a", "b"]),
        st.sampled_from([None, 0, 5, 15]),
    ), min_size=6, max_size=max_rows))
    rows = []
    for key, step, temp, src, row_lat in events:
        clock[key] += step * SECOND
        lat = table[key] if not per_key_lateness else row_lat
        rows.append((f"d{key}", clock[key], float(temp), None if lat is None else lat * SECOND, src))
    cuts = sorted(set(draw(st.lists(st.integers(1, len(rows) - 1), min_size=1, max_size=5))))
    bounds = [0] + cuts + [len(rows)]
    return [rows[a:b] for a, b in zip(bounds, bounds[1:])]


def policy_rows(batches) -> List[List[list]]:
    """Policy rows as rows of POLICY_SCHEMA (lateness as a duration string), times in micros."""
    return [[[k, t, v, None if lat is None else f"{lat // SECOND} seconds", src] for k, t, v, lat, src in b]
            for b in batches]


# The arrival clock's policy rows: POLICY_SCHEMA's and each row's arrival time.
ARRIVAL_SCHEMA = POLICY_SCHEMA + ", arr TIMESTAMP"
ARRIVAL_BASE_MS = 1_700_000_000_000


@st.composite
def arrival_schedule(draw, batches) -> Tuple[List[List[tuple]], List[List[Optional[int]]]]:
    """The stream's arrival times: each data batch arrives some time after the one before (gaps
    around the idle timeout, up to more than twice it), each row within a second of it or with a
    null arrival time, a row's arrival possibly older than an earlier batch's (a slow uploader);
    after a batch that moved the clock Spark may run a no-data batch (no rows arrived by the next
    trigger). Returns the batches (empty: a no-data batch) and each row's arrival (ms or None)."""
    gap_ms = st.sampled_from([0, 1_000, 3_000, 9_999, 10_000, 12_000, 25_000]).map(int)
    now = ARRIVAL_BASE_MS
    out: List[List[tuple]] = []
    arrivals: List[List[Optional[int]]] = []
    for rows in batches:
        now += draw(gap_ms)
        out.append(rows)
        arrivals.append([draw(st.one_of(st.none(), st.integers(now - 15_000, now + 999))) for _ in rows])
        if rows and any(a is not None for a in arrivals[-1]) and draw(st.booleans()):
            out.append([])
            arrivals.append([])
    return out, arrivals


def arrival_clocks(arrivals: List[List[Optional[int]]]) -> List[Tuple[int, int]]:
    """Per batch, Spark's global watermark on the arrival time (the max arrival of the batches
    before, 0 before the first) and a processing time; plus the trailing no-data batch Spark runs
    when the last batch moved it."""
    marks = [max((a for b in arrivals[:n] for a in b if a is not None), default=0)
             for n in range(len(arrivals) + 1)]
    count = len(arrivals) + (1 if marks[-1] > marks[-2] else 0)
    return [(marks[n], 1000 * (n + 1)) for n in range(count)]


def arrival_rows(batches, arrivals: List[List[Optional[int]]]) -> List[List[list]]:
    """Policy rows with their arrival times as rows of ARRIVAL_SCHEMA (arrival in micros)."""
    return [[r + [None if a is None else a * 1000] for r, a in zip(b, arr)]
            for b, arr in zip(policy_rows(batches), arrivals)]


# At most this many generated examples per end-to-end property (explicit @example cases always
# run): dev/test sets it on the older Spark lines, which check that their jar behaves like the
# main line's, while the main line runs each property's full count.
E2E_EXAMPLES_MAX = int(os.environ.get("KW_E2E_EXAMPLES_MAX", "0")) or None


def spark_examples(n: int):
    """Hypothesis settings for tests whose every example runs a Spark query: no shrinking (it
    would run dozens more queries; the failing example is printed, and the `note`s show the
    model's view of it), no example database, no deadline. `n` generated examples, capped by
    KW_E2E_EXAMPLES_MAX when set."""
    return settings(
        max_examples=n if E2E_EXAMPLES_MAX is None else min(n, E2E_EXAMPLES_MAX),
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# Generated cases per in-memory rule (the end-to-end layer runs 4-8 each); KW_IN_MEMORY_CASES
# overrides.
IN_MEMORY_CASES = int(os.environ.get("KW_IN_MEMORY_CASES", "100"))
in_memory = settings(
    max_examples=IN_MEMORY_CASES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def four_device_batches(seed: int = 7, n_batches: int = 8) -> List[List[tuple]]:
    """4 devices at different speeds; out-of-order rows, some late rows, a few invalid rows.
    Rows are (key, micros|None, temp) (the restart and kill-recovery tests)."""
    rng = random.Random(seed)
    speeds = {"d0": 2, "d1": 3, "d2": 1, "d3": 6}  # seconds per row, on average
    clock = {d: BASE for d in speeds}
    batches = []
    for _ in range(n_batches):
        rows = []
        for _ in range(14):
            d = rng.choice(sorted(speeds))
            clock[d] += rng.randint(0, 2 * speeds[d]) * SECOND
            t = clock[d] - (rng.randint(0, 20) * SECOND if rng.random() < 0.2 else 0)
            rows.append((d, t, float(rng.randint(0, 40)) / 2))  # halves: sums and avgs exact
        rows.append((None, clock["d0"], 1.0))
        if rng.random() < 0.5:
            rows.append(("d1", None, 1.0))
        batches.append(rows)
    return batches


# --------------------------------------------------------------------------------------
# The in-memory operator (jvm/src/test/.../testing/OperatorHarness.scala)
# --------------------------------------------------------------------------------------

HARNESS = "io.github.keyedwatermarks.testing.OperatorHarness"
ROOT = Path(__file__).resolve().parent.parent


def _harness_classes() -> Path:
    """sbt's compiled Scala test classes (./dev/test compiles them before pytest runs)."""
    import pytest

    found = sorted(ROOT.glob("jvm/**/test-classes/io/github/keyedwatermarks/testing/OperatorHarness.class"),
                   key=lambda p: p.stat().st_mtime)
    if not found:
        pytest.fail("OperatorHarness is not compiled: run ./dev/sbt core/Test/compile (./dev/test does)")
    return found[-1].parents[4]


def operator_harness_factory(spark) -> Callable[..., Any]:
    """A factory of in-memory operators: make(options, aggs, columns=None, schema=EVENT_SCHEMA)
    with the options of QueryOptions (the Python keywords). Loaded from the Scala test classes
    by a class loader whose parent sees the session's jars (the keyed-watermarks jar, Spark)."""
    jvm = spark.sparkContext._jvm
    gateway = spark.sparkContext._gateway
    urls = gateway.new_array(jvm.java.net.URL, 1)
    urls[0] = jvm.java.io.File(str(_harness_classes())).toURI().toURL()
    loader = jvm.java.net.URLClassLoader.newInstance(urls, jvm.Thread.currentThread().getContextClassLoader())
    constructor = loader.loadClass(HARNESS).getConstructors()[0]

    def make(options: Dict[str, Any], aggs: List, columns: Optional[Dict] = None, schema: str = EVENT_SCHEMA):
        jcolumns = jvm.java.util.HashMap()
        for name, c in (columns or {}).items():
            jcolumns.put(name, c._jc)
        jaggs = jvm.java.util.ArrayList()
        for c in aggs:
            jaggs.add(c._jc)
        args = gateway.new_array(jvm.java.lang.Object, 5)
        for i, a in enumerate([spark._jsparkSession, schema, json.dumps(options), jcolumns, jaggs]):
            args[i] = a
        return constructor.newInstance(args)

    return make


class Out:
    """One output row of the in-memory operator: its columns as attributes (times in micros)."""

    def __init__(self, row: Dict[str, Any], window_col: str) -> None:
        self.__dict__.update(row)
        window = row.get(window_col) or {}
        self.start, self.end, self.wm = window.get("start"), window.get("end"), row["kw_watermark"]
        self.revision = row.get("revision") or 0


def run_batches(h, batches: Sequence[Sequence[Sequence[Any]]],
                clocks: Optional[Sequence[Tuple[int, int]]] = None) -> List[List[Dict[str, Any]]]:
    """Runs every batch (rows as lists in the harness' schema order) through the harness;
    returns each batch's output rows as dicts, the operator's "key" rows too. `clocks`: per
    batch, Spark's global watermark and the processing time (ms); batches beyond `batches` are
    no-data batches. By default no global watermark and one second per batch."""
    clocks = list(clocks) if clocks is not None else [(0, 1000 * (n + 1)) for n in range(len(batches))]
    return json.loads(h.run(json.dumps([[list(r) for r in b] for b in batches]), json.dumps(clocks)))


def output_rows(per_batch: List[List[Dict[str, Any]]], window_col: str) -> List[Tuple[int, Out]]:
    """(batch, output row) pairs of run_batches' result, without the operator's "key" rows:
    they only feed the per-batch metrics (the planner drops them)."""
    return [(n, Out(r, window_col)) for n, rows in enumerate(per_batch) for r in rows if r["kw_kind"] != "key"]


def run_in_memory(h, batches: Sequence[Sequence[Sequence[Any]]], window_col: str,
                  clocks: Optional[Sequence[Tuple[int, int]]] = None) -> List[Tuple[int, Out]]:
    """run_batches, then output_rows: (batch, output row) pairs."""
    return output_rows(run_batches(h, batches, clocks), window_col)


# Helpers of the in-memory operator rules (tests/test_operator_in_memory.py, test_dedup.py,
# test_emit_in_memory.py): options, aggregates and the comparison with the reference model.

def late_per_batch_key(out) -> Counter:
    """In-memory output (batch, row) -> late rows per (batch, key), from the report rows."""
    return Counter({(n, r.device): r.kw_late_rows for n, r in out if r.kw_kind == "late"})


def options(lateness_s: int, **windows) -> Dict[str, Any]:
    """The in-memory harness' options for the operator rules: key `device`, event time `ts`."""
    # No skew bound: the reference model's rules per key (the skew bound and the other policies
    # are in tests/test_policies_in_memory.py, against the policy model).
    return {"key": ["device"], "event_time": "ts", "lateness": f"{lateness_s} seconds", "report": True,
            "max_skew": "unbounded", **windows}


def agg_of(values):
    """The model's (count, sum, min, max) of a window's values, as aggs() computes them."""
    present = [v for v in values if v is not None]
    return (len(values), float(sum(present)) if present else None,
            min(present) if present else None, max(present) if present else None)


def aggs() -> List:
    """count, sum, min, max of `temp`: the aggregates agg_of computes in the model."""
    return [F.count("*").alias("n"), F.sum("temp").alias("s"), F.min("temp").alias("lo"), F.max("temp").alias("hi")]


def window_spec(size_s: int, slide_s: Optional[int] = None, allowed_s: int = 0) -> Dict[str, str]:
    """The `window` option of a case: its size, slide (if any) and allowed lateness (if any)."""
    spec = {"size": f"{size_s} seconds"}
    if slide_s:
        spec["slide"] = f"{slide_s} seconds"
    if allowed_s:
        spec["allowed_lateness"] = f"{allowed_s} seconds"
    return spec


def check_emitted_windows(out, model) -> None:
    """The harness' emitted windows (bounds, aggs(), the key's watermark before the step that
    emitted them, revision) equal the reference model's, each in its batch."""
    got = Counter((n, r.device, r.start, r.end, r.n, r.s, r.lo, r.hi, r.wm, r.revision)
                  for n, r in out if r.kw_kind == "window")
    want = Counter((w.batch, w.key, w.start, w.end) + agg_of(w.values) + (w.watermark_at_start, w.revision)
                   for w in model.emitted)
    assert got == want


def check_windows(out, model) -> None:
    """The harness' emitted windows and late rows equal the reference model's."""
    check_emitted_windows(out, model)
    assert late_per_batch_key(out) == Counter(model.late)
    got_wm = {(n, r.device): r.wm for n, r in out if r.kw_kind == "late"}
    assert got_wm == {k: model.late_watermark[k] for k in model.late}
    assert {r.kw_kind for _, r in out} <= {"window", "late"}


def session_aggs() -> List:
    """count and the sorted values of `temp`: what check_emitted_sessions compares."""
    return [F.count("*").alias("n"), F.sort_array(F.collect_list("temp")).alias("temps")]


def session_values(vs) -> tuple:
    """A session's values as session_aggs() collects them: without nulls (collect_list skips
    them, as Spark does), in a fixed order."""
    return tuple(sorted((v for v in vs if v is not None), key=repr))


def check_emitted_sessions(out, model) -> None:
    """The harness' emitted sessions (bounds, values of session_aggs(), revision) equal the
    session model's, each in its batch."""
    got = Counter((n, r.device, r.start, r.end, session_values(r.temps), r.revision)
                  for n, r in out if r.kw_kind == "window")
    want = Counter((s.batch, s.key, s.start, s.end, session_values(s.values), s.revision) for s in model.emitted)
    assert got == want
