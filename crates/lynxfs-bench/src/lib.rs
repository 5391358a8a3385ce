//! Benchmark suites comparing LynxFS with kernel file systems (issue 7).
