"""Calibration of the planner's models against real vLLM runs: the start-up rows and the memory model's fits
(``fit_truth``, ``fit_errors``), the performance model against load tests (``perf_model``), and the
least-squares helper they share (``fitting``). Not shipped: the package holds only the fitted constants."""
