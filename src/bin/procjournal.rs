//! The `procjournal` binary: everything lives in the library's `cli` module.

fn main() -> std::process::ExitCode {
    // First, before any thread exists: this executable is also every launch's guardian.
    procjournal::run_guardian_if_requested();
    procjournal::cli_main()
}
