//! The host's services: where lifecycle events are published and completions are notified.
//!
//! Both are called from blocking tasks after the supervisor has released everything the process
//! held, so a slow or stuck implementation delays only its own notification. A failure (`Err`)
//! leaves the publication unrecorded in the journal; the next restore retries it under the same
//! event ID, so implementations deduplicate by ID to get exactly-once.

use std::fmt::Debug;
use std::sync::Arc;

use serde::Serialize;

use crate::journal::EventId;
use crate::lifecycle::event::ExitStatus;
use crate::lifecycle::{Handle, State};

/// A lifecycle step, published under the event ID that was persisted with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LifecycleNotice {
    pub event_id: EventId,
    pub handle: Handle,
    pub state: State,
}

/// A process reached a terminal state; `command_id` was allocated when it was registered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Completion {
    pub command_id: EventId,
    pub handle: Handle,
    pub state: State,
    pub exit: ExitStatus,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("host service failed: {0}")]
pub struct ServiceError(pub String);

pub trait LifecyclePublisher: Send + Sync + Debug {
    fn publish(&self, notice: &LifecycleNotice) -> Result<(), ServiceError>;

    /// Whether anything hears the notices: `false` only for a publisher that drops them all
    /// (those of [`Services::noop`]). An event is made durable before it is published for a
    /// listener's sake; with none, the supervisor publishes without that wait, so that a
    /// `running` published on its own costs no `fdatasync` of its own.
    fn hears(&self) -> bool {
        true
    }
}

pub trait CompletionNotifier: Send + Sync + Debug {
    fn notify(&self, completion: &Completion) -> Result<(), ServiceError>;

    /// As [`LifecyclePublisher::hears`], for completions.
    fn hears(&self) -> bool {
        true
    }
}

/// The services a supervisor is opened with.
#[derive(Debug, Clone)]
pub struct Services {
    pub publisher: Arc<dyn LifecyclePublisher>,
    pub notifier: Arc<dyn CompletionNotifier>,
}

/// Accepts everything and does nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoopServices;

impl LifecyclePublisher for NoopServices {
    fn publish(&self, _: &LifecycleNotice) -> Result<(), ServiceError> {
        Ok(())
    }

    fn hears(&self) -> bool {
        false
    }
}

impl CompletionNotifier for NoopServices {
    fn notify(&self, _: &Completion) -> Result<(), ServiceError> {
        Ok(())
    }

    fn hears(&self) -> bool {
        false
    }
}

impl Services {
    pub fn noop() -> Self {
        Services {
            publisher: Arc::new(NoopServices),
            notifier: Arc::new(NoopServices),
        }
    }

    /// Services that forward everything into an unbounded channel, in order.
    pub fn channel() -> (Self, tokio::sync::mpsc::UnboundedReceiver<ServiceEvent>) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let sink = Arc::new(ChannelSink(tx));
        (
            Services {
                publisher: sink.clone(),
                notifier: sink,
            },
            rx,
        )
    }
}

/// What the channel services deliver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceEvent {
    Published(LifecycleNotice),
    Completed(Completion),
}

#[derive(Debug)]
struct ChannelSink(tokio::sync::mpsc::UnboundedSender<ServiceEvent>);

impl LifecyclePublisher for ChannelSink {
    fn publish(&self, notice: &LifecycleNotice) -> Result<(), ServiceError> {
        self.0
            .send(ServiceEvent::Published(notice.clone()))
            .map_err(|_| ServiceError("the receiver is gone".to_owned()))
    }
}

impl CompletionNotifier for ChannelSink {
    fn notify(&self, completion: &Completion) -> Result<(), ServiceError> {
        self.0
            .send(ServiceEvent::Completed(completion.clone()))
            .map_err(|_| ServiceError("the receiver is gone".to_owned()))
    }
}
