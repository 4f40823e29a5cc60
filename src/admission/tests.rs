//! The policy with injected telemetry: cores, available memory and tree samples are its inputs.

use super::*;
use crate::journal::EventId;

const GIB: u64 = 1 << 30;

fn handle(n: u8) -> Handle {
    Handle(EventId::from_bytes([n; 16]))
}

fn host(cores: usize, available: u64) -> HostSample {
    HostSample {
        cores: Some(cores),
        available_bytes: Some(available),
    }
}

fn sample(members: &[(u32, u64)], bytes: u64) -> TreeSample {
    TreeSample {
        members: members.to_vec(),
        bytes,
        complete: true,
        ..TreeSample::default()
    }
}

/// A complete one-member walk at `at_usec` whose tree has taken `cpu_usec` of CPU so far.
fn walk(member: u32, bytes: u64, cpu_usec: u64, at_usec: u64) -> TreeSample {
    TreeSample {
        members: vec![(member, 1)],
        bytes,
        complete: true,
        cpu_usec,
        wait_usec: 0,
        at_usec,
    }
}

/// Two walks a second apart in which the tree took `millis` of CPU per second: stable.
fn settle(a: &mut Admission, h: u8, bytes: u64, millis: u64) {
    a.observe(&handle(h), walk(u32::from(h), bytes, 0, 1_000_000));
    a.observe(
        &handle(h),
        walk(u32::from(h), bytes, millis * 1000, 2_000_000),
    );
}

fn automatic(h: HostSample) -> Admission {
    Admission::new(AdmissionConfig::default(), 256, h)
}

/// Fills slots until a decision refuses; returns how many were admitted.
fn fill(a: &mut Admission, from: u8) -> usize {
    let mut n = 0;
    while a.decide().admit {
        a.admit(handle(from + n as u8));
        n += 1;
        assert!(n < 200, "no bound");
    }
    n
}

/// Unsampled workloads are charged a core each, and fit while the charges are below 70 % of
/// the cores: 16 cores (11.2 cores of budget) take 12 new workloads before any is sampled.
#[test]
fn new_workloads_are_charged_a_core_each() {
    let mut a = automatic(host(16, 1024 * GIB));
    assert_eq!(fill(&mut a, 0), 12);
    let d = a.decide();
    assert_eq!(
        (d.basis, d.count_slots, d.slots, d.charged_millis),
        (Basis::Automatic, Some(12), 12, 12_000)
    );
    assert_eq!(d.core_budget_millis, Some(11_200));
    assert!(!d.admit);
}

/// On 2 cores (1.4 cores of budget): two CPU-bound workloads are admitted, the third waits while
/// they are charged a full core each, and idle ones free their cores once sampled.
#[test]
fn two_cores_run_two_busy_loops_and_any_number_of_idle_ones() {
    let mut a = automatic(host(2, 22 * GIB));
    assert_eq!(fill(&mut a, 0), 2);
    settle(&mut a, 0, 1 << 20, 1000);
    settle(&mut a, 1, 1 << 20, 990);
    let d = a.decide();
    assert_eq!((d.charged_millis, d.admit), (1990, false), "{d:?}");
    // One of them stops: the third fits.
    a.release(&handle(1));
    assert!(a.decide().admit);
    a.release(&handle(0));
    // Idle trees: two at a time until each is sampled, then nearly nothing each.
    for round in 0..10u8 {
        let first = round * 2;
        assert_eq!(fill(&mut a, first), 2, "round {round}");
        settle(&mut a, first, 300 << 10, 0);
        settle(&mut a, first + 1, 300 << 10, 1);
    }
    let d = a.decide();
    assert_eq!(d.in_use, 20);
    assert_eq!(d.charged_millis, 10, "{d:?}");
    assert!(d.admit);
    // An idle tree that wakes up is charged what it now uses.
    a.observe(&handle(0), walk(0, 300 << 10, 1_400_000, 3_000_000));
    let d = a.decide();
    assert_eq!(d.charged_millis, 1410);
    assert!(!d.admit, "{d:?}");
}

/// Only a stable pair of walks measures a charge; a rate needs the clock to advance, and time
/// waiting on a run queue counts as demand (a busy loop on a contended host wants its core).
#[test]
fn charges_come_from_stable_pairs_only() {
    let mut a = automatic(host(8, 100 * GIB));
    a.admit(handle(1));
    a.observe(&handle(1), walk(1, GIB, 0, 1_000_000));
    assert_eq!(a.reservations()[0].charged_millis, CORE_MILLIS, "one walk");
    // Same instant: no interval, so no rate.
    a.observe(&handle(1), walk(1, GIB, 500, 1_000_000));
    let r = &a.reservations()[0];
    assert_eq!((r.sample, r.observed_millis), (SampleState::Stable, None));
    assert_eq!(r.charged_millis, CORE_MILLIS);
    // Half a second of CPU and half of waiting over one second: a whole core.
    let mut contended = walk(1, GIB, 500_500, 2_000_000);
    contended.wait_usec = 500_000;
    a.observe(&handle(1), contended);
    let r = &a.reservations()[0];
    assert_eq!((r.observed_millis, r.charged_millis), (Some(1000), 1000));
    // A membership change: one core again.
    let mut changed = walk(1, GIB, 600_000, 3_000_000);
    changed.members.push((2, 1));
    a.observe(&handle(1), changed);
    assert_eq!(a.reservations()[0].charged_millis, CORE_MILLIS);
    // Four threads busy: four cores.
    let mut more = walk(1, GIB, 4_600_000, 4_000_000);
    more.members.push((2, 1));
    a.observe(&handle(1), more);
    assert_eq!(a.decide().charged_millis, 4000);
}

/// A stable sample's reservation is what it observed, below the floor too (an idle process stops
/// holding the floor), but every new start must still find one floor free in the pool.
#[test]
fn a_stable_sample_below_the_floor_reserves_what_it_saw() {
    let mut a = automatic(host(64, 3 * GIB));
    // 70 % of 3 GiB holds one floor.
    assert_eq!(fill(&mut a, 0), 1);
    settle(&mut a, 0, 100 << 20, 0);
    let d = a.decide();
    assert_eq!(d.reserved_bytes, 100 << 20);
    assert!(d.admit, "the floor is free again: {d:?}");
    a.admit(handle(1));
    assert!(!a.decide().admit, "an unsampled workload holds its floor");
}

/// Each workload reserves the 2 GiB floor: 10 GiB available at 70 % is a 7 GiB pool, three
/// floors.
#[test]
fn the_floor_bounds_memory() {
    let mut a = automatic(host(64, 10 * GIB));
    assert_eq!(fill(&mut a, 0), 3);
    let d = a.decide();
    assert_eq!(d.reserved_bytes, 6 * GIB);
    assert_eq!(d.pool_bytes, Some(7 * GIB));
    assert_eq!(d.memory_slots, Some(3));
    assert!(!d.admit);
}

/// One slot always: too little memory for one floor, and a core budget below one core.
#[test]
fn at_least_one_slot_always() {
    let mut a = automatic(host(1, GIB / 2));
    let d = a.decide();
    assert_eq!(
        (d.count_slots, d.memory_slots, d.slots),
        (Some(1), Some(0), 1)
    );
    assert_eq!(d.core_budget_millis, Some(700));
    assert!(d.admit);
    a.admit(handle(1));
    assert!(!a.decide().admit);
    a.release(&handle(1));
    assert!(a.decide().admit);
}

/// No available-memory telemetry: one automatic slot, whatever the cores.
#[test]
fn missing_memory_telemetry_gives_one_slot() {
    let mut a = automatic(HostSample {
        cores: Some(64),
        available_bytes: None,
    });
    assert_eq!(fill(&mut a, 0), 1);
    let d = a.decide();
    assert_eq!((d.basis, d.slots), (Basis::NoMemoryTelemetry, 1));
    assert!(!a.telemetry_complete());
}

/// Only a complete sample seen twice with the same membership raises a reservation above the
/// floor; the stable reservation is what the larger walk saw.
#[test]
fn a_stable_sample_raises_the_reservation() {
    let mut a = automatic(host(64, 100 * GIB));
    a.admit(handle(1));
    let members = [(10, 5), (11, 6)];
    a.observe(&handle(1), sample(&members, 5 * GIB));
    assert_eq!(a.reservations()[0].sample, SampleState::Unstable);
    assert_eq!(a.decide().reserved_bytes, 2 * GIB, "one walk is not stable");
    a.observe(&handle(1), sample(&members, 6 * GIB));
    let r = &a.reservations()[0];
    assert_eq!(
        (r.sample, r.observed_bytes, r.reserved_bytes),
        (SampleState::Stable, Some(6 * GIB), 6 * GIB)
    );
    let d = a.decide();
    // The observed memory is ours, so it is added back to what is available.
    assert_eq!(d.observed_bytes, 6 * GIB);
    assert_eq!(d.pool_bytes, Some(106 * GIB * 70 / 100));
    assert!(a.telemetry_complete());
    // Below the floor a stable sample reserves what it saw.
    a.observe(&handle(1), sample(&members, GIB));
    a.observe(&handle(1), sample(&members, GIB));
    assert_eq!(a.reservations()[0].reserved_bytes, GIB);
}

/// An incomplete sample (a member unreadable) keeps the floor, and so does the complete sample
/// right after it: stability needs two complete walks in a row.
#[test]
fn an_incomplete_sample_keeps_the_floor() {
    let mut a = automatic(host(64, 100 * GIB));
    a.admit(handle(1));
    let members = [(10, 5)];
    a.observe(&handle(1), sample(&members, 8 * GIB));
    a.observe(&handle(1), sample(&members, 8 * GIB));
    assert_eq!(a.decide().reserved_bytes, 8 * GIB);
    let mut incomplete = sample(&members, 50 * GIB);
    incomplete.complete = false;
    a.observe(&handle(1), incomplete);
    let r = &a.reservations()[0];
    assert_eq!(
        (r.sample, r.reserved_bytes),
        (SampleState::Incomplete, 2 * GIB)
    );
    assert_eq!(a.decide().observed_bytes, 0);
    assert!(!a.telemetry_complete());
    a.observe(&handle(1), sample(&members, 8 * GIB));
    assert_eq!(a.reservations()[0].sample, SampleState::Unstable);
    assert_eq!(a.decide().reserved_bytes, 2 * GIB);
}

/// A membership that changed between two complete walks (a child came, or a pid was reused
/// with another start time) is unstable: the floor.
#[test]
fn an_unstable_sample_keeps_the_floor() {
    let mut a = automatic(host(64, 100 * GIB));
    a.admit(handle(1));
    a.observe(&handle(1), sample(&[(10, 5)], 8 * GIB));
    a.observe(&handle(1), sample(&[(10, 5), (12, 9)], 8 * GIB));
    assert_eq!(a.reservations()[0].sample, SampleState::Unstable);
    a.observe(&handle(1), sample(&[(10, 5), (12, 10)], 8 * GIB));
    assert_eq!(a.reservations()[0].sample, SampleState::Unstable);
    assert_eq!(a.decide().reserved_bytes, 2 * GIB);
    a.observe(&handle(1), sample(&[(10, 5), (12, 10)], 8 * GIB));
    assert_eq!(a.decide().reserved_bytes, 8 * GIB);
}

/// A large stable workload leaves room for fewer floors: 20 GiB available, one workload seen
/// at 9 GiB: pool 0.7 x 29 = 20.3 GiB, 9 reserved, 5 more floors.
#[test]
fn reservations_share_the_pool() {
    let mut a = automatic(host(64, 20 * GIB));
    a.admit(handle(1));
    a.observe(&handle(1), sample(&[(1, 1)], 9 * GIB));
    a.observe(&handle(1), sample(&[(1, 1)], 9 * GIB));
    assert_eq!(fill(&mut a, 10), 5);
    assert_eq!(a.in_use(), 6);
    // Its release frees its whole reservation.
    a.release(&handle(1));
    assert_eq!(a.decide().reserved_bytes, 10 * GIB);
    assert_eq!(a.decide().observed_bytes, 0);
}

/// An explicit host limit replaces the automatic one: cores and memory are not consulted, even
/// without telemetry.
#[test]
fn a_host_limit_overrides() {
    let config = AdmissionConfig::max_concurrent(5);
    let mut a = Admission::new(config, 256, HostSample::default());
    assert_eq!(fill(&mut a, 0), 5);
    assert_eq!(a.decide().basis, Basis::HostLimit);

    let config = AdmissionConfig {
        memory_budget_bytes: Some(9 * GIB),
        ..AdmissionConfig::default()
    };
    let mut a = Admission::new(config, 256, host(1, GIB));
    assert_eq!(fill(&mut a, 0), 4, "9 GiB is four 2 GiB floors");
    // A host limit still takes at least one slot, and the live bound caps every decision.
    let config = AdmissionConfig {
        memory_budget_bytes: Some(1),
        ..AdmissionConfig::default()
    };
    let mut a = Admission::new(config, 256, host(1, GIB));
    assert_eq!(fill(&mut a, 0), 1);
    let mut a = Admission::new(
        AdmissionConfig::max_concurrent(50),
        3,
        HostSample::default(),
    );
    assert_eq!(fill(&mut a, 0), 3);
}

/// Samples of a workload that holds no capacity (released meanwhile) change nothing, and
/// admitting or releasing twice counts once.
#[test]
fn late_samples_and_repeats_change_nothing() {
    let mut a = automatic(host(64, 100 * GIB));
    a.admit(handle(1));
    a.admit(handle(1));
    assert_eq!(a.in_use(), 1);
    assert!(a.release(&handle(1)));
    assert!(!a.release(&handle(1)));
    a.observe(&handle(1), sample(&[(1, 1)], 9 * GIB));
    let d = a.decide();
    assert_eq!((d.in_use, d.reserved_bytes, d.observed_bytes), (0, 0, 0));
    assert!(a.telemetry_complete());
}

/// A limit set at runtime replaces the automatic policy and is dropped again by `None`, back to
/// the configured settings; workloads holding capacity keep it when the limit is lowered.
#[test]
fn a_runtime_limit_replaces_and_returns() {
    let mut a = automatic(host(2, 22 * GIB));
    a.set_limit(Some(4));
    assert_eq!(a.runtime_limit(), Some(4));
    assert_eq!(fill(&mut a, 0), 4);
    let d = a.decide();
    assert_eq!(
        (d.basis, d.slots, d.runtime_limit),
        (Basis::HostLimit, 4, true)
    );
    assert!(
        describe(&d).contains("runtime limit: max_concurrent 4"),
        "{}",
        describe(&d)
    );
    a.set_limit(Some(1));
    let d = a.decide();
    assert_eq!((d.in_use, d.slots, d.admit), (4, 1, false));
    a.set_limit(None);
    assert_eq!(a.runtime_limit(), None);
    let d = a.decide();
    assert_eq!((d.basis, d.runtime_limit), (Basis::Automatic, false));
    assert!(!d.admit, "four unsampled workloads charge four cores");
    // A configured limit is what `None` returns to.
    let mut a = Admission::new(AdmissionConfig::max_concurrent(3), 256, host(2, 22 * GIB));
    a.set_limit(Some(9));
    a.set_limit(None);
    assert_eq!(a.decide().max_concurrent, Some(3));
}

proptest::proptest! {
    /// Whatever the host and the workloads' charges and reservations, a start is admitted exactly
    /// when nothing holds capacity, or the charges are below the core budget and one floor is
    /// free in the pool (within the live bound).
    #[test]
    fn admission_is_the_rule(
        cores in 1usize..64,
        available in 0u64..(64 * GIB),
        loads in proptest::collection::vec((0u64..(8 * GIB), 0u64..3000, proptest::bool::ANY), 0..24),
        live_bound in 1usize..40,
    ) {
        let mut a = Admission::new(AdmissionConfig::default(), live_bound, host(cores, available));
        for (i, (bytes, millis, sampled)) in loads.iter().enumerate() {
            let h = u8::try_from(i).unwrap_or(u8::MAX);
            a.admit(handle(h));
            if *sampled {
                settle(&mut a, h, *bytes, *millis);
            }
        }
        let d = a.decide();
        let rs = a.reservations();
        let charged: u64 = rs.iter().map(|r| r.charged_millis).sum();
        let reserved: u64 = rs.iter().map(|r| r.reserved_bytes).sum();
        let observed: u64 = rs.iter().filter_map(|r| r.observed_bytes).sum();
        let budget = cores as u64 * 700;
        let pool = (u128::from(available + observed) * 70 / 100) as u64;
        let floor_free = pool.saturating_sub(reserved) >= 2 * GIB;
        let expected = d.in_use < live_bound && (d.in_use == 0 || (charged < budget && floor_free));
        proptest::prop_assert_eq!(d.admit, expected, "{:?}", d);
        proptest::prop_assert_eq!(d.charged_millis, charged);
        proptest::prop_assert!(d.slots >= 1);
    }

    /// Whatever the order of admissions, samples and releases, the kept sums equal the sums
    /// recomputed from the reservations, a decision never gives 0 slots, an unsettled workload
    /// holds the floor and a core and a stable one what it was seen to hold, and everything
    /// released leaves nothing reserved or charged.
    #[test]
    fn sums_stay_exact(ops in proptest::collection::vec((0u8..4, 0u8..6, 0u64..(64 * GIB), proptest::bool::ANY, 0u32..3, 0u64..4_000_000), 0..200)) {
        let mut a = automatic(host(8, 64 * GIB));
        let mut clock = 0u64;
        for (op, h, bytes, complete, m, cpu) in ops {
            clock += 250_000;
            match op {
                0 => a.admit(handle(h)),
                1 => { a.release(&handle(h)); }
                _ => a.observe(&handle(h), TreeSample {
                    members: vec![(m, 1)],
                    bytes,
                    complete,
                    cpu_usec: cpu,
                    wait_usec: cpu / 3,
                    at_usec: clock,
                }),
            }
            let rs = a.reservations();
            let d = a.decide();
            proptest::prop_assert_eq!(d.reserved_bytes, rs.iter().map(|r| r.reserved_bytes).sum::<u64>());
            proptest::prop_assert_eq!(d.observed_bytes, rs.iter().filter_map(|r| r.observed_bytes).sum::<u64>());
            proptest::prop_assert_eq!(d.charged_millis, rs.iter().map(|r| r.charged_millis).sum::<u64>());
            proptest::prop_assert!(d.slots >= 1);
            for r in &rs {
                if r.sample == SampleState::Stable {
                    proptest::prop_assert_eq!(Some(r.reserved_bytes), r.observed_bytes);
                    proptest::prop_assert_eq!(r.charged_millis, r.observed_millis.unwrap_or(CORE_MILLIS));
                } else {
                    proptest::prop_assert_eq!((r.reserved_bytes, r.charged_millis), (2 * GIB, CORE_MILLIS));
                }
            }
            proptest::prop_assert_eq!(
                a.telemetry_complete(),
                rs.iter().all(|r| r.sample == SampleState::Stable)
            );
        }
        for h in 0..6 {
            a.release(&handle(h));
        }
        let d = a.decide();
        proptest::prop_assert_eq!((d.in_use, d.reserved_bytes, d.observed_bytes, d.charged_millis), (0, 0, 0, 0));
    }
}
