//! `procjournal-guardian`: the small image of the guardian, which `procjournal` runs for each
//! launch when it finds it beside itself (`GuardianProgram::beside_current_exe`).
//!
//! Invariant: nothing but the guardian runs here. No runtime is started, no argument parser or
//! log subscriber is set up, and the library's guardian code is the only code reached, so that
//! the image a guardian maps stays small (its relocated data is what every guardian pays in
//! private pages). Started any other way, it says what it is and exits 2.

/// Each forked guardian keeps as its own every page it or its zygote writes: this allocator keeps
/// them few (see its documentation).
#[global_allocator]
static ALLOCATOR: procjournal::GuardianAllocator = procjournal::GuardianAllocator::new();

fn main() -> std::process::ExitCode {
    procjournal::run_guardian_if_requested();
    eprintln!(
        "procjournal-guardian: not started as a guardian; procjournal runs it for each launch"
    );
    std::process::ExitCode::from(2)
}
