"""The end-to-end benchmark harness behind run_benchmarks.py, one module per job:

- data: configurations and the generated parquet files;
- methods: each method's streaming query (add a method here);
- timing: one timed run (wall, JVM CPU, heap, state metrics);
- emission: emission delay per window;
- competitors: the Python competitors' output checked against ours;
- report: the markdown table;
- profiling: Java Flight Recordings;
- flink: the Flink reference and the delayed-devices accuracy;
- latency_mode: --latency;
- session: the SparkSession.
"""
