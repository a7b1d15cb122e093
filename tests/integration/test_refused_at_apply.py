"""The table of specs refused at apply (tests.harness.hostile.REFUSED_AT_APPLY) on a real apiserver.

Each row is sent with ``kubectl apply --dry-run=server`` to kube-apiserver with the committed CRD:
it must be refused, the error must name the row's field path (``spec.serving.extraArgs[0]``,
``spec.serving.modelCache.mountPath``) and, for a rule over the whole of ``serving.extraArgs``, the
guilty entry's index (``extraArgs[2]``). tests/unit/test_refused_at_apply.py holds the models to the
same table.
"""

from __future__ import annotations

import pytest

from tests.harness.cluster import SessionCluster
from tests.harness.hostile import REFUSED_AT_APPLY, RefusedAtApply

from .test_api_crd import dry_run, manifest, namespace  # noqa: F401  (fixture)

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("row", REFUSED_AT_APPLY, ids=[f"{r.family}-{r.id}" for r in REFUSED_AT_APPLY])
def test_every_row_is_refused_at_apply_naming_the_field(
    cluster: SessionCluster,
    namespace: str,  # noqa: F811
    row: RefusedAtApply,
) -> None:
    result = dry_run(cluster, namespace, manifest(row.spec))
    assert result.returncode != 0, f"accepted: {row.id}"
    assert f"{row.field}:" in result.stderr, result.stderr
    if row.entry is not None:
        assert f"extraArgs[{row.entry}]" in result.stderr, result.stderr
