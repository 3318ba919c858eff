"""The closing summary: each claim is a check computed from what was measured."""

from __future__ import annotations

from dataclasses import dataclass

from ..models import ArchivedMessage
from .recorder import Recorder
from .sampler import Samples
from .scenario import POISON_TENANT, TENANTS, Tenant


@dataclass(frozen=True)
class Check:
    ok: bool
    text: str

    def line(self) -> str:
        return f"  [{'ok' if self.ok else 'FAIL'}] {self.text}"


def run_checks(
    recorder: Recorder,
    samples: Samples,
    failed: list[ArchivedMessage],
    live: int,
    broken: list[str],
) -> list[Check]:
    checks: list[Check] = []
    expected = sum(t.jobs for t in TENANTS) - 1  # all but the poison job
    done = sum(r.done for r in recorder.tenants.values())
    retried = sum(r.transient_failures for r in recorder.tenants.values())
    checks.append(
        Check(
            done == expected and live == 0,
            f"{done}/{expected} jobs completed, {live} left in the queue "
            f"({retried} failed attempts retried with backoff)",
        )
    )
    poison = [a for a in failed if a.channel == POISON_TENANT]
    if len(poison) == 1:
        error = (poison[0].error or "").splitlines()[0]
        checks.append(
            Check(
                True,
                f"poison job archived as {poison[0].outcome} after "
                f"{poison[0].num_attempts} attempts: {error}",
            )
        )
    else:
        checks.append(Check(False, f"expected one archived poison job, found {len(poison)}"))
    for tenant in TENANTS:
        if tenant.max_concurrency is not None:
            checks.append(concurrency_check(tenant, recorder, samples))
        if tenant.release_interval_ms:
            checks.append(rate_check(tenant, recorder))
    checks.append(fairness_check(recorder))
    checks.append(
        Check(
            not broken,
            "verify(): no broken invariants" if not broken else "verify(): " + "; ".join(broken),
        )
    )
    return checks


def concurrency_check(tenant: Tenant, recorder: Recorder, samples: Samples) -> Check:
    assert tenant.max_concurrency is not None
    handlers = recorder.tenants[tenant.name].max_in_flight
    database = samples.max_locked.get(tenant.name, 0)
    ok = handlers <= tenant.max_concurrency and database <= tenant.max_concurrency
    return Check(
        ok,
        f"{tenant.name}: at most {handlers} running in handlers and {database} "
        f"locked in {samples.count} database samples (limit "
        f"{tenant.max_concurrency})",
    )


def rate_check(tenant: Tenant, recorder: Recorder) -> Check:
    gap = recorder.tenants[tenant.name].min_gap_ms()
    ok = gap is not None and gap >= tenant.release_interval_ms
    return Check(
        ok,
        f"{tenant.name}: shortest gap between deliveries {gap} ms on the "
        f"database clock (limit {tenant.release_interval_ms} ms)",
    )


def fairness_check(recorder: Recorder) -> Check:
    noisy = recorder.tenants["noisy"].avg_wait_s
    small = [recorder.tenants[t.name].avg_wait_s for t in TENANTS if t.name.startswith("small")]
    worst_small = max(small)
    # Fair rotation serves a newly arrived small job within a round of turns, while the
    # noisy tenant's own backlog makes it wait: small tenants must wait far less.
    ok = worst_small < 1.0 and worst_small < noisy
    return Check(
        ok,
        f"fairness: small tenants waited at most {worst_small:.2f}s on average "
        f"while the noisy tenant's backlog waited {noisy:.2f}s",
    )
