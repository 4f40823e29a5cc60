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
    }
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

/// 70 % of the cores bounds the count: 16 cores give 11 slots with memory to spare.
#[test]
fn the_core_share_bounds_the_count() {
    let mut a = automatic(host(16, 1024 * GIB));
    assert_eq!(fill(&mut a, 0), 11);
    let d = a.decide();
    assert_eq!(
        (d.basis, d.count_slots, d.slots),
        (Basis::Automatic, Some(11), 11)
    );
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

/// One slot always: one core (70 % of it rounds to 0) and too little memory for one floor.
#[test]
fn at_least_one_slot_always() {
    let mut a = automatic(host(1, GIB / 2));
    let d = a.decide();
    assert_eq!(
        (d.count_slots, d.memory_slots, d.slots),
        (Some(1), Some(0), 1)
    );
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
    // Below the floor a stable sample keeps the floor.
    a.observe(&handle(1), sample(&members, GIB));
    a.observe(&handle(1), sample(&members, GIB));
    assert_eq!(a.reservations()[0].reserved_bytes, 2 * GIB);
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

proptest::proptest! {
    /// Whatever the order of admissions, samples and releases, the kept sums equal the sums
    /// recomputed from the reservations, a decision never gives 0 slots, and everything released
    /// leaves nothing reserved.
    #[test]
    fn sums_stay_exact(ops in proptest::collection::vec((0u8..4, 0u8..6, 0u64..(64 * GIB), proptest::bool::ANY, 0u32..3), 0..200)) {
        let mut a = automatic(host(8, 64 * GIB));
        for (op, h, bytes, complete, m) in ops {
            match op {
                0 => a.admit(handle(h)),
                1 => { a.release(&handle(h)); }
                _ => a.observe(&handle(h), TreeSample { members: vec![(m, 1)], bytes, complete }),
            }
            let rs = a.reservations();
            let d = a.decide();
            proptest::prop_assert_eq!(d.reserved_bytes, rs.iter().map(|r| r.reserved_bytes).sum::<u64>());
            proptest::prop_assert_eq!(d.observed_bytes, rs.iter().filter_map(|r| r.observed_bytes).sum::<u64>());
            proptest::prop_assert!(d.slots >= 1);
            proptest::prop_assert!(rs.iter().all(|r| r.reserved_bytes >= 2 * GIB));
            proptest::prop_assert_eq!(
                a.telemetry_complete(),
                rs.iter().all(|r| r.sample == SampleState::Stable)
            );
        }
        for h in 0..6 {
            a.release(&handle(h));
        }
        let d = a.decide();
        proptest::prop_assert_eq!((d.in_use, d.reserved_bytes, d.observed_bytes), (0, 0, 0));
    }
}
