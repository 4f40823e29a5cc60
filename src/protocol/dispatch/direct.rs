//! The operations answered by a call or two into the supervisor: who is answering, what the
//! processes are, a process's stdin, terminal size and interrupt, and `clean`.
//!
//! Invariants: each resolves the process it names before it does anything else, so a
//! reference to no process changes nothing; results name processes by handle, never by path.

use std::time::Duration;

use super::{
    Dispatcher, HelloResult, InputResult, InterruptResult, ListResult, ProcessInfo, ResizeResult,
    api, unknown,
};
use crate::lifecycle::retention::CleanReport;
use crate::lifecycle::{Manifest, ProcessRef};
use crate::protocol::{ApiError, ErrorCode};
use crate::supervisor::ListFilter;

impl Dispatcher {
    pub(super) fn hello(&self) -> HelloResult {
        let sup = &self.supervisor;
        HelloResult {
            protocol: crate::protocol::PROTOCOL_VERSION,
            version: env!("CARGO_PKG_VERSION"),
            pid: std::process::id(),
            live: sup.live_count(),
            paused: sup.gate().paused,
            damage: sup.damage().map(str::to_owned),
        }
    }

    pub(super) fn process_info(&self, reference: &ProcessRef) -> Result<ProcessInfo, ApiError> {
        let m = self
            .supervisor
            .resolve(reference)
            .map_err(|e| ApiError::new(ErrorCode::UnknownHandle, e.to_string()))?;
        Ok(ProcessInfo::from(&m))
    }

    pub(super) fn list(&self, filter: &ListFilter) -> ListResult {
        let processes: Vec<ProcessInfo> = self
            .supervisor
            .list(filter)
            .iter()
            .map(ProcessInfo::from)
            .collect();
        ListResult { processes }
    }

    pub(super) fn manifest(&self, reference: &ProcessRef) -> Result<Manifest, ApiError> {
        let handle = self.resolve(reference)?;
        self.supervisor
            .manifest(&handle)
            .ok_or_else(|| unknown(&handle))
    }

    /// Writes `data` (when there is any) before closing stdin (when asked), so a client can send
    /// its last bytes and the end of input in one request.
    pub(super) async fn input(
        &self,
        reference: &ProcessRef,
        data: &[u8],
        close: bool,
    ) -> Result<InputResult, ApiError> {
        let handle = self.resolve(reference)?;
        let sup = &self.supervisor;
        if !data.is_empty() {
            sup.input(&handle, data).await.map_err(api)?;
        }
        if close {
            sup.close_input(&handle).await.map_err(api)?;
        }
        Ok(InputResult {
            handle,
            bytes_written: data.len() as u64,
            closed: close,
        })
    }

    pub(super) async fn resize(
        &self,
        reference: &ProcessRef,
        rows: u16,
        cols: u16,
    ) -> Result<ResizeResult, ApiError> {
        let handle = self.resolve(reference)?;
        self.supervisor
            .resize(&handle, rows, cols)
            .await
            .map_err(api)?;
        Ok(ResizeResult { handle, rows, cols })
    }

    pub(super) async fn signal_interrupt(
        &self,
        reference: &ProcessRef,
    ) -> Result<InterruptResult, ApiError> {
        let handle = self.resolve(reference)?;
        self.interrupt(handle).await?;
        Ok(InterruptResult {
            handle,
            signalled: "SIGINT".to_owned(),
        })
    }

    /// `clean` of what is older than `older_than_ms`, by default the supervisor's retention age.
    pub(super) async fn clean(
        &self,
        older_than_ms: Option<u64>,
        dry_run: bool,
    ) -> Result<CleanReport, ApiError> {
        let sup = &self.supervisor;
        let older_than = older_than_ms.map_or_else(|| sup.retention_age(), Duration::from_millis);
        sup.clean(older_than, dry_run).await.map_err(api)
    }
}
