"""The operator at run time: work queue, leader election, reconcile (observe, compute, execute)."""
