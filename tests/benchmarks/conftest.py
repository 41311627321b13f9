"""Benchmark scripts import their sibling modules (``_results``, ``_rival``, ``gemm_peak``)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
