//! The closed set of process states and the one transition matrix.
//!
//! Invariant: [`TRANSITIONS`] is the only statement of which moves are allowed; the manifest
//! validator, the docs table and the tests all read it. No state leaves a terminal state.

use bincode::{Decode, Encode};
use serde::Serialize;

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    serde::Deserialize,
    Encode,
    Decode,
)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum State {
    Starting,
    Running,
    Exited,
    Failed,
    TimedOut,
    Interrupted,
    Terminated,
    Killed,
    LostOnRestore,
}

impl State {
    pub const ALL: [State; 9] = [
        State::Starting,
        State::Running,
        State::Exited,
        State::Failed,
        State::TimedOut,
        State::Interrupted,
        State::Terminated,
        State::Killed,
        State::LostOnRestore,
    ];

    pub fn is_terminal(self) -> bool {
        !matches!(self, State::Starting | State::Running)
    }

    pub fn name(self) -> &'static str {
        match self {
            State::Starting => "starting",
            State::Running => "running",
            State::Exited => "exited",
            State::Failed => "failed",
            State::TimedOut => "timed_out",
            State::Interrupted => "interrupted",
            State::Terminated => "terminated",
            State::Killed => "killed",
            State::LostOnRestore => "lost_on_restore",
        }
    }

    /// Whether the matrix allows `self -> to`.
    pub fn can_move_to(self, to: State) -> bool {
        TRANSITIONS
            .iter()
            .any(|(from, targets)| *from == self && targets.contains(&to))
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The transition matrix, exactly as the requirements state it. States not listed have no way out.
pub const TRANSITIONS: &[(State, &[State])] = &[
    (
        State::Starting,
        &[
            State::Running,
            State::Failed,
            State::Terminated,
            State::Killed,
            State::LostOnRestore,
        ],
    ),
    (
        State::Running,
        &[
            State::Exited,
            State::Failed,
            State::TimedOut,
            State::Interrupted,
            State::Terminated,
            State::Killed,
            State::LostOnRestore,
        ],
    ),
];
