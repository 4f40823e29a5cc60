//! Soft admission from observed load (the seed's "Automatic agent admission"; DESIGN.md,
//! "Capacity and policy"): whether one more workload may start now, decided from the host's
//! cores and available memory and from samples of the live trees, never from durable
//! reservations.
//!
//! A workload is a supervised root and all its descendants (its tree, [`crate::tree`]). The
//! policy, for the automatic case:
//! - cores are charged by what a tree is observed to demand, not by count: its CPU time (the
//!   scope's `cpu.stat` usage, else its members' utime+stime) plus the time its members were
//!   runnable but waited for a CPU (their schedstat), as a rate over the interval between two
//!   samples. A new workload is charged one core until its first stable sample, so a burst of
//!   builds is not all admitted at once; an idle tree (a `sleep`, a dev server waiting for a
//!   request) is then charged almost nothing;
//! - the core budget is `share` of the detected logical cores (70 % by default); a start fits
//!   while the charges are below it (on 2 cores: two CPU-bound loops run, the third waits);
//! - the memory pool is `share` of the memory available now (MemAvailable, or the headroom of our
//!   own cgroup and its ancestors where that is lower) plus what the stably sampled workloads
//!   already use (it is missing from "available" because they hold it, and is counted once, in
//!   their reservations);
//! - every new start must find the floor (2 GiB by default) free in the pool; a workload without
//!   a complete stable sample reserves the floor;
//! - at least one slot, always; no available-memory telemetry means one automatic slot;
//! - an explicit host limit (`max_concurrent`, `memory_budget_bytes`, or the runtime limit set
//!   by `admission --max-concurrent`) replaces the automatic policy: cores and available memory
//!   are then not consulted.
//!
//! Why a stable sample's reservation is what it observed, below the floor too: the seed reserves
//! the floor for an agent workload, which starts small and grows. A general supervisor runs idle
//! processes as well (a `sleep 600`, a server waiting for requests, a watcher), and holding 2 GiB
//! and a core for each of them would refuse the second start on a small host while the host is
//! idle. So the floor is kept where the seed's reason holds (a workload nothing has measured yet,
//! or whose membership is changing, as a build's does) and is what every new admission must find
//! free; once two complete walks of a tree agree, what they saw is what it holds. A workload that
//! grows again changes its membership or its memory, and the next samples follow it.
//!
//! Invariants:
//! - This module decides; it does no I/O but through [`Telemetry`], which the supervisor calls on
//!   the blocking pool. [`Admission`] is owned by the supervisor's actor (one owner, no lock), and
//!   a decision is a few arithmetic operations on sums it keeps current: it costs nothing beside
//!   a start.
//! - A sample is complete when its tree's membership could be listed and every member's memory
//!   and CPU time were read; it is stable when it is complete and the sample before it was
//!   complete with the same membership (the same (pid, start time) pairs). Anything else (no
//!   sample yet, an incomplete or an unstable one) reserves exactly the floor and one core.
//! - A workload holds capacity from its admission until the supervisor releases it: when its
//!   terminal result is recorded, or, when members of its tree outlive the leader, when the tree
//!   is empty; a tree nothing proved gone (unverified) keeps holding it, charged what can still
//!   be observed of it (its cgroup, or its process group: `tree::assess::observable`). One whose
//!   guardian died with no cgroup and whose group is empty is charged nothing: a descendant that
//!   left the group is invisible to every mechanism here, and charging it a core for ever would
//!   refuse every later start on a small host. It stays `unverified`, never released, and
//!   under an explicit limit it still counts as one workload.

mod host;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

pub use host::available_memory;
#[cfg(any(test, feature = "test-support"))]
pub use host::{parse_cgroup_limit, parse_meminfo_available};

use crate::lifecycle::Handle;
use crate::limits;
use crate::tree::{Membership, ProcessTree, TreeSample};

/// The admission policy's settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AdmissionConfig {
    /// Percent (1 to 100) of detected logical cores and of available memory that automatic
    /// admission may spend.
    pub share_percent: u8,
    /// The least memory reserved per workload.
    pub floor_bytes: u64,
    /// An explicit host limit on workloads at once; replaces the automatic policy.
    pub max_concurrent: Option<usize>,
    /// An explicit host memory budget for all workloads' reservations together; replaces the
    /// automatic policy.
    pub memory_budget_bytes: Option<u64>,
    /// How often trees and the host are sampled while anything holds capacity or waits.
    pub sample_every: Duration,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        AdmissionConfig {
            share_percent: limits::ADMISSION_SHARE_PERCENT_DEFAULT,
            floor_bytes: limits::ADMISSION_FLOOR_BYTES_DEFAULT,
            max_concurrent: None,
            memory_budget_bytes: None,
            sample_every: Duration::from_millis(limits::ADMISSION_SAMPLE_MS),
        }
    }
}

impl AdmissionConfig {
    /// An explicit host limit of `n` workloads at once, nothing else consulted.
    pub fn max_concurrent(n: usize) -> Self {
        AdmissionConfig {
            max_concurrent: Some(n),
            ..AdmissionConfig::default()
        }
    }

    /// Whether the host set an explicit limit (which replaces the automatic policy).
    pub fn explicit(&self) -> bool {
        self.max_concurrent.is_some() || self.memory_budget_bytes.is_some()
    }

    /// Refuses settings no decision could honour; the message names the field.
    pub fn check(&self) -> Result<(), String> {
        if !(1..=100).contains(&self.share_percent) {
            return Err(format!(
                "admission.share_percent {} is out of range (1 to 100)",
                self.share_percent
            ));
        }
        if self.floor_bytes == 0 {
            return Err("admission.floor_bytes must be positive".to_owned());
        }
        if self.max_concurrent == Some(0) {
            return Err("admission.max_concurrent must be at least 1".to_owned());
        }
        if self.sample_every.is_zero() {
            return Err("admission.sample_every must be positive".to_owned());
        }
        Ok(())
    }
}

/// What the host offers now: detected logical cores and available memory (`None`: unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct HostSample {
    pub cores: Option<usize>,
    pub available_bytes: Option<u64>,
}

/// The policy's inputs: the host and the trees. The supervisor calls both on the blocking pool;
/// tests inject their own (the policy's input, not a stand-in for the kernel).
pub trait Telemetry: Send + Sync + Debug {
    /// The host's cores and available memory now.
    fn host(&self) -> HostSample;

    /// One sample of each tree (a handle left out counts as not sampled: the floor).
    fn trees(&self, trees: &[(Handle, Arc<dyn ProcessTree>)]) -> Vec<(Handle, TreeSample)>;

    /// One sample of each tree held unverified, by what can still be observed of it (no live
    /// tree object stands for it); the real walk of `/proc` and the cgroup unless overridden.
    fn held(&self, trees: &[(Handle, Membership)]) -> Vec<(Handle, TreeSample)> {
        crate::tree::sample_memberships(trees)
    }
}

/// The real telemetry: [`std::thread::available_parallelism`] (which honours CPU affinity and a
/// cgroup's CPU quota), [`available_memory`], and [`crate::tree::sample_trees`].
#[derive(Debug, Default, Clone, Copy)]
pub struct ProcTelemetry;

impl Telemetry for ProcTelemetry {
    fn host(&self) -> HostSample {
        HostSample {
            cores: std::thread::available_parallelism().ok().map(usize::from),
            available_bytes: available_memory(),
        }
    }

    fn trees(&self, trees: &[(Handle, Arc<dyn ProcessTree>)]) -> Vec<(Handle, TreeSample)> {
        crate::tree::sample_trees(trees)
    }
}

/// What the samples of one workload establish.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum SampleState {
    /// Not sampled yet (or its tree cannot be: an unverified tree held after its guardian died).
    None,
    /// The last sample missed members, memory or CPU time.
    Incomplete,
    /// Complete, but its membership differs from the sample before (or there was none before).
    Unstable,
    /// Two consecutive complete samples with the same membership.
    Stable,
}

/// One core, in the millicores charges are counted in.
pub const CORE_MILLIS: u64 = 1000;

/// One workload's reservation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WorkloadReservation {
    pub handle: Handle,
    pub reserved_bytes: u64,
    /// The memory a stable sample saw (the larger of its two walks); `None` unless stable.
    pub observed_bytes: Option<u64>,
    /// The cores charged to it, in millicores: what a stable sample saw it demand, else one core.
    pub charged_millis: u64,
    /// The CPU demand a stable sample saw (millicores); `None` unless stable.
    pub observed_millis: Option<u64>,
    pub sample: SampleState,
    /// Members in the last sample.
    pub members: usize,
}

/// Which rule set the slot count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// Cores and available memory, at the configured share.
    Automatic,
    /// Available memory is unknown: one automatic slot.
    NoMemoryTelemetry,
    /// The host's explicit limit.
    HostLimit,
}

/// One admission decision and every input it was made from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Decision {
    /// Whether one more workload may start now.
    pub admit: bool,
    /// Workloads that may hold capacity at once, given the charges and reservations held now (at
    /// least 1): `in_use` plus the new workloads (each charged a core and the floor) that fit.
    pub slots: usize,
    /// Workloads holding capacity now (live, lingering and unverified trees).
    pub in_use: usize,
    pub basis: Basis,
    pub cores: Option<usize>,
    pub available_bytes: Option<u64>,
    pub share_percent: u8,
    pub floor_bytes: u64,
    /// The sum of every workload's reservation.
    pub reserved_bytes: u64,
    /// The sum of what stable samples saw (added back to the available memory: it is ours).
    pub observed_bytes: u64,
    /// The memory the reservations must fit in (`None`: no memory bound applies).
    pub pool_bytes: Option<u64>,
    /// The sum of every workload's core charge, in millicores.
    pub charged_millis: u64,
    /// The cores the charges must stay below, in millicores (`None`: no core bound applies).
    pub core_budget_millis: Option<u64>,
    /// The slot bound from cores (automatic: `in_use` plus the one-core charges that still fit
    /// below the budget) or `max_concurrent` (host limit).
    pub count_slots: Option<usize>,
    /// The slot bound from memory: `in_use` plus the floors that still fit in the pool.
    pub memory_slots: Option<usize>,
    pub max_concurrent: Option<usize>,
    pub memory_budget_bytes: Option<u64>,
    /// Whether `max_concurrent` was set at runtime (`admission --max-concurrent`), over the
    /// configured settings.
    pub runtime_limit: bool,
    /// The live-process bound (configuration and descriptor budget), which caps everything.
    pub live_bound: usize,
}

/// The admission state a supervisor's actor owns: the policy, the host's last sample, and each
/// workload holding capacity with its samples. The sums a decision needs are kept current.
#[derive(Debug)]
pub struct Admission {
    config: AdmissionConfig,
    /// The configured `max_concurrent`, restored by [`Admission::set_limit`]`(None)`.
    configured_max: Option<usize>,
    runtime_limit: bool,
    live_bound: usize,
    host: HostSample,
    workloads: HashMap<Handle, Workload>,
    reserved_sum: u64,
    observed_sum: u64,
    charged_sum: u64,
    /// Workloads whose last sample is not stable (incomplete, unstable or none).
    unsettled: usize,
}

#[derive(Debug)]
struct Workload {
    last: Option<TreeSample>,
    state: SampleState,
    observed: Option<u64>,
    reserved: u64,
    observed_millis: Option<u64>,
    charged: u64,
}

/// What a stable pair of samples saw: the larger memory of the two walks, and the CPU demand
/// over the interval between them (`None` when the clock did not advance).
fn stable_pair(prev: &TreeSample, next: &TreeSample) -> Option<(u64, Option<u64>)> {
    if !(prev.complete && next.complete && prev.members == next.members) {
        return None;
    }
    let dt = next.at_usec.saturating_sub(prev.at_usec);
    let busy = next
        .cpu_usec
        .saturating_sub(prev.cpu_usec)
        .saturating_add(next.wait_usec.saturating_sub(prev.wait_usec));
    let millis = (dt > 0).then(|| {
        let m = u128::from(busy) * u128::from(CORE_MILLIS) / u128::from(dt);
        u64::try_from(m).unwrap_or(u64::MAX)
    });
    Some((prev.bytes.max(next.bytes), millis))
}

impl Admission {
    /// `live_bound`: the live-process bound every decision is capped by.
    pub fn new(config: AdmissionConfig, live_bound: usize, host: HostSample) -> Admission {
        Admission {
            configured_max: config.max_concurrent,
            runtime_limit: false,
            config,
            live_bound: live_bound.max(1),
            host,
            workloads: HashMap::new(),
            reserved_sum: 0,
            observed_sum: 0,
            charged_sum: 0,
            unsettled: 0,
        }
    }

    /// Sets the limit on workloads at once at runtime (`Some(n)`: an explicit host limit of `n`,
    /// which replaces the automatic policy), or returns to the configured settings (`None`).
    /// Workloads holding capacity keep it: a lower limit only holds back new starts.
    pub fn set_limit(&mut self, max_concurrent: Option<usize>) {
        self.runtime_limit = max_concurrent.is_some();
        self.config.max_concurrent = max_concurrent.map(|n| n.max(1)).or(self.configured_max);
    }

    /// The limit set at runtime, if one is.
    #[cfg(any(test, feature = "test-support"))]
    pub fn runtime_limit(&self) -> Option<usize> {
        self.runtime_limit
            .then_some(self.config.max_concurrent)
            .flatten()
    }

    #[cfg(any(test, feature = "test-support"))]
    pub fn host(&self) -> HostSample {
        self.host
    }

    /// Workloads holding capacity.
    pub fn in_use(&self) -> usize {
        self.workloads.len()
    }

    /// Takes capacity for `handle` (the floor and one core until its samples say otherwise).
    /// Idempotent.
    pub fn admit(&mut self, handle: Handle) {
        if self.workloads.contains_key(&handle) {
            return;
        }
        let floor = self.config.floor_bytes;
        self.workloads.insert(
            handle,
            Workload {
                last: None,
                state: SampleState::None,
                observed: None,
                reserved: floor,
                observed_millis: None,
                charged: CORE_MILLIS,
            },
        );
        self.reserved_sum = self.reserved_sum.saturating_add(floor);
        self.charged_sum = self.charged_sum.saturating_add(CORE_MILLIS);
        self.unsettled += 1;
    }

    /// Gives `handle`'s capacity back; true if it held any.
    pub fn release(&mut self, handle: &Handle) -> bool {
        let Some(w) = self.workloads.remove(handle) else {
            return false;
        };
        self.reserved_sum = self.reserved_sum.saturating_sub(w.reserved);
        self.charged_sum = self.charged_sum.saturating_sub(w.charged);
        if let Some(o) = w.observed {
            self.observed_sum = self.observed_sum.saturating_sub(o);
        }
        if w.state != SampleState::Stable {
            self.unsettled -= 1;
        }
        true
    }

    /// Records the host's sample.
    pub fn observe_host(&mut self, host: HostSample) {
        self.host = host;
    }

    /// Records one sample of `handle`'s tree (ignored for a workload that holds no capacity).
    pub fn observe(&mut self, handle: &Handle, sample: TreeSample) {
        let floor = self.config.floor_bytes;
        let Some(w) = self.workloads.get_mut(handle) else {
            return;
        };
        let stable = w.last.as_ref().and_then(|prev| stable_pair(prev, &sample));
        let (state, observed, observed_millis) = match stable {
            Some((bytes, millis)) => (SampleState::Stable, Some(bytes), millis),
            None if sample.complete => (SampleState::Unstable, None, None),
            None => (SampleState::Incomplete, None, None),
        };
        let reserved = observed.unwrap_or(floor);
        let charged = observed_millis.unwrap_or(CORE_MILLIS);
        // Keep the sums current: out with the old values, in with the new.
        self.reserved_sum = self
            .reserved_sum
            .saturating_sub(w.reserved)
            .saturating_add(reserved);
        self.observed_sum = self
            .observed_sum
            .saturating_sub(w.observed.unwrap_or(0))
            .saturating_add(observed.unwrap_or(0));
        self.charged_sum = self
            .charged_sum
            .saturating_sub(w.charged)
            .saturating_add(charged);
        match (w.state == SampleState::Stable, state == SampleState::Stable) {
            (true, false) => self.unsettled += 1,
            (false, true) => self.unsettled -= 1,
            _ => {}
        }
        w.state = state;
        w.observed = observed;
        w.reserved = reserved;
        w.observed_millis = observed_millis;
        w.charged = charged;
        w.last = Some(sample);
    }

    /// Whether every workload's last sample is stable (vacuously true with none).
    pub fn telemetry_complete(&self) -> bool {
        self.unsettled == 0 && self.host.available_bytes.is_some()
    }

    /// The automatic bounds from the host: (core budget in millicores, core slots, memory pool).
    fn automatic_bounds(&self, available: u64) -> (u64, usize, u64) {
        let c = &self.config;
        let share = u64::from(c.share_percent);
        let cores = u64::try_from(self.host.cores.unwrap_or(1)).unwrap_or(u64::MAX);
        let budget = cores
            .saturating_mul(share)
            .saturating_mul(CORE_MILLIS / 100);
        // New workloads are charged one core each; they fit while the charges are below the
        // budget, so the count is the ceiling of what is left over one core.
        let left = budget.saturating_sub(self.charged_sum);
        let fit = left.div_ceil(CORE_MILLIS);
        let core_slots = self
            .workloads
            .len()
            .saturating_add(usize::try_from(fit).unwrap_or(usize::MAX));
        let ours = available.saturating_add(self.observed_sum);
        // share% of `ours` without overflow: u128 for the product.
        let pool = u64::try_from(u128::from(ours) * u128::from(share) / 100).unwrap_or(u64::MAX);
        (budget, core_slots, pool)
    }

    /// Whether one more workload may start now, and why.
    pub fn decide(&self) -> Decision {
        let c = &self.config;
        let in_use = self.workloads.len();
        let floor = c.floor_bytes;
        let (basis, budget, count_slots, pool) = if c.explicit() {
            let basis = Basis::HostLimit;
            (basis, None, c.max_concurrent, c.memory_budget_bytes)
        } else {
            match self.host.available_bytes {
                None => (Basis::NoMemoryTelemetry, None, Some(1), None),
                Some(available) => {
                    let (budget, slots, pool) = self.automatic_bounds(available);
                    (Basis::Automatic, Some(budget), Some(slots), Some(pool))
                }
            }
        };
        let memory_slots = pool.map(|pool| {
            let free = pool.saturating_sub(self.reserved_sum) / floor;
            in_use.saturating_add(usize::try_from(free).unwrap_or(usize::MAX))
        });
        let slots = count_slots
            .unwrap_or(usize::MAX)
            .min(memory_slots.unwrap_or(usize::MAX))
            .max(1)
            .min(self.live_bound);
        Decision {
            admit: in_use < slots,
            slots,
            in_use,
            basis,
            cores: self.host.cores,
            available_bytes: self.host.available_bytes,
            share_percent: c.share_percent,
            floor_bytes: floor,
            reserved_bytes: self.reserved_sum,
            observed_bytes: self.observed_sum,
            pool_bytes: pool,
            charged_millis: self.charged_sum,
            core_budget_millis: budget,
            count_slots,
            memory_slots,
            max_concurrent: c.max_concurrent,
            memory_budget_bytes: c.memory_budget_bytes,
            runtime_limit: self.runtime_limit,
            live_bound: self.live_bound,
        }
    }

    /// Every workload's reservation, by handle.
    pub fn reservations(&self) -> Vec<WorkloadReservation> {
        let mut out: Vec<WorkloadReservation> = self
            .workloads
            .iter()
            .map(|(handle, w)| WorkloadReservation {
                handle: *handle,
                reserved_bytes: w.reserved,
                observed_bytes: w.observed,
                charged_millis: w.charged,
                observed_millis: w.observed_millis,
                sample: w.state,
                members: w.last.as_ref().map_or(0, |s| s.members.len()),
            })
            .collect();
        out.sort_by_key(|r| r.handle);
        out
    }
}

/// What [`crate::supervisor::Supervisor::admission`] reports: the decision a start would get now,
/// every reservation, and the starts waiting for capacity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AdmissionSnapshot {
    pub decision: Decision,
    pub reservations: Vec<WorkloadReservation>,
    /// Whether available memory is known and every workload's last sample is stable.
    pub telemetry_complete: bool,
    /// Starts waiting for capacity (FIFO).
    pub queued: usize,
    pub queue_max: usize,
    /// Milliseconds since the host and the trees were last sampled.
    pub sampled_ms_ago: u64,
}

/// A decision in one line, for errors and logs: "2 of 2 slots in use (automatic: 2.0 of 1.4
/// cores charged (2 cores at 70 %), 4.0 GiB reserved by 2 workload(s) of a 15.4 GiB pool
/// (22.0 GiB available), floor 2.0 GiB each)".
pub fn describe(d: &Decision) -> String {
    let gib = |b: u64| format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64);
    let cores = |m: u64| format!("{:.1}", m as f64 / CORE_MILLIS as f64);
    let unknown = || "unknown".to_owned();
    let basis = match d.basis {
        Basis::Automatic => format!(
            "automatic: {} of {} cores charged ({} cores at {} %), {} reserved by {} \
             workload(s) of a {} pool ({} available), floor {} each",
            cores(d.charged_millis),
            d.core_budget_millis.map_or_else(unknown, cores),
            d.cores.map_or_else(unknown, |c| c.to_string()),
            d.share_percent,
            gib(d.reserved_bytes),
            d.in_use,
            d.pool_bytes.map_or_else(unknown, gib),
            d.available_bytes.map_or_else(unknown, gib),
            gib(d.floor_bytes),
        ),
        Basis::NoMemoryTelemetry => "available memory is unknown, so one automatic slot".to_owned(),
        Basis::HostLimit => format!(
            "{}: max_concurrent {}, memory budget {}, {} reserved",
            if d.runtime_limit {
                "runtime limit"
            } else {
                "host limit"
            },
            d.max_concurrent
                .map_or_else(|| "none".to_owned(), |n| n.to_string()),
            d.memory_budget_bytes.map_or_else(|| "none".to_owned(), gib),
            gib(d.reserved_bytes),
        ),
    };
    format!("{} of {} slots in use ({basis})", d.in_use, d.slots)
}
