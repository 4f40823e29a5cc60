//! The actor's handlers of what process tasks and background passes report ([`ProcEvent`]),
//! each run on the actor in the order the events arrive.
//!
//! Invariants:
//! - A handle gives back its unit of `live` once: when it leaves the table before it lingers
//!   (abandoned here, or at its terminal gate), or when its held tree is proven gone; its
//!   admission is released only once nothing of it is owned (`Actor::settle`).
//! - Nothing here awaits or spawns: whatever must wait runs in a task that `actor.rs` spawns
//!   into the actor's set, so that shutdown joins it.
//!
//! [`ProcEvent`]: crate::supervisor::process::ProcEvent

use std::time::Duration;

use super::{Actor, ShutdownState, TerminalSummary};
use crate::admission::HostSample;
use crate::lifecycle::Handle;
use crate::limits;
use crate::supervisor::deadline;
use crate::tree::{Mechanism, TreeSample};

impl Actor {
    pub(super) fn abandoned(&mut self, handle: Handle) {
        self.free_name(&handle);
        if self.table.remove(&handle).is_some() {
            self.live = self.live.saturating_sub(1);
            self.publish_live();
        }
        self.settle(&handle);
    }

    pub(super) fn deadline_failed(&mut self, handle: Handle) {
        if let Some(e) = self.table.get(&handle).filter(|e| !e.lingering) {
            let now = tokio::time::Instant::now();
            e.proc.clocks.retry_after(now, deadline::retry_delay());
            self.arm_sweep(now + deadline::retry_delay());
        }
    }

    pub(super) fn terminal_gate_passed(
        &mut self,
        handle: Handle,
        summary: TerminalSummary,
        lingering: bool,
        unverified: bool,
    ) {
        self.finished(handle, summary, lingering);
        if unverified {
            self.hold(handle);
        }
        self.settle(&handle);
    }

    /// A group's tree is never held: nothing could prove it gone later either.
    pub(super) fn tree_emptied(&mut self, handle: Handle, proven: bool) {
        if self.table.get(&handle).is_some_and(|e| e.lingering) {
            let mechanism = self
                .table
                .remove(&handle)
                .and_then(|e| e.proc.tree.get().map(|t| t.mechanism()));
            self.lingering -= 1;
            if !proven && mechanism.is_some_and(|m| m != Mechanism::Group) {
                self.hold(handle);
            }
        }
        self.settle(&handle);
    }

    pub(super) fn sampled(&mut self, host: Option<HostSample>, trees: Vec<(Handle, TreeSample)>) {
        self.sampling = false;
        self.last_sampled = tokio::time::Instant::now();
        if let Some(host) = host {
            self.admission.observe_host(host);
            self.host_read = true;
        }
        for (handle, sample) in trees {
            self.admission.observe(&handle, sample);
        }
    }

    pub(super) fn snapshotted(&mut self) {
        if matches!(self.shutdown, ShutdownState::Open) {
            self.next_snapshot_check =
                Some(tokio::time::Instant::now() + self.shared.config.snapshots.check_every);
        }
    }

    /// Ends a retention pass and starts the next one asked for meanwhile.
    pub(super) fn retired(&mut self, retired: &[Handle], scheduled: bool) {
        // A cached reader would keep the removed files' space and answer reads the
        // retirement ended.
        for handle in retired {
            self.readers.remove(handle);
        }
        if scheduled && matches!(self.shutdown, ShutdownState::Open) {
            self.next_retention = Some(
                tokio::time::Instant::now()
                    + Duration::from_millis(limits::RETENTION_PASS_INTERVAL_MS),
            );
        }
        self.retention_running = false;
        if let Some((request, reply)) = self.retention_waiting.pop_front() {
            self.retention_pass(request, reply);
        }
    }

    pub(super) fn assessed(&mut self, released: Vec<Handle>) {
        for handle in released {
            if self.held.remove(&handle).is_some() {
                self.live = self.live.saturating_sub(1);
            }
            self.settle(&handle);
        }
        self.publish_live();
        if !self.held.is_empty() && matches!(self.shutdown, ShutdownState::Open) {
            self.next_assessment = Some(
                tokio::time::Instant::now() + Duration::from_millis(limits::ASSESS_INTERVAL_MS),
            );
        }
    }
}
